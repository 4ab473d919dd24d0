#pragma once
// Recurrent ops: a whole recurrent layer (one direction) as one differentiable op, for the LSTM,
// the GRU and the Elman RNN (tanh or ReLU), on a padded sequence or a packed one, and their cells.
//
// Gate order and formulas are PyTorch's (torch.nn.LSTM, GRU, RNN):
//   RNN:  h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act = tanh or relu
//   LSTM: gates = x W_ih^T + b_ih + h W_hh^T + b_hh, 4 blocks of H: i, f, g, o
//         i = sigmoid, f = sigmoid, g = tanh, o = sigmoid; c' = f * c + i * g, h' = o * tanh(c')
//   GRU:  3 blocks of H: r, z, n
//         r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
//         n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),  h' = (1 - z) * n + z * h
// float32 and float64.
//
// Padded or packed. With batch_sizes undefined, input is [T, B, I] and output [T, B, H]. With
// batch_sizes (a 1-D CPU int64 tensor, PackedSequence::batch_sizes(): T positive, non-increasing
// counts), input is a packed sequence's data [N, I] (N = sum of batch_sizes; step t's rows are the
// first batch_sizes[t] sequences, in a block after the previous steps' rows) and output is [N, H] in
// the same layout; h0 (c0) are [batch_sizes[0], H]. Each sequence's final state (h_n, c_n) is its
// state after its own last step; in reverse, each sequence starts at its own last element.
//
// How they run on the CPU: the input projection of the whole sequence is one GEMM (biases folded
// in), then each step is one GEMM for h W_hh^T over the step's rows (a packed step's rows are a
// prefix of the batch: no masks, no wasted rows) and one fused gate loop. Each call is one autograd
// node (LstmLayerBackward0, GruLayerBackward0, RnnTanhLayerBackward0, RnnReluLayerBackward0) with a
// fused backward (BPTT: per step a fused gate loop and one GEMM; the input and weight gradients one
// GEMM each over the whole sequence). Under create_graph the backward is computed with dp ops (the
// *_composite graph) so that it can be differentiated again. On CUDA the padded LSTM has its own
// kernels (cuBLAS GEMMs, fused gate kernels); the other cases run the composite form there.
#include <cstdint>
#include <tuple>
#include "dp/core/tensor.h"

namespace dp {

// The nonlinearity of an Elman RNN (torch.nn.RNN(nonlinearity='tanh' | 'relu')).
enum class RNNNonlinearity : uint8_t { Tanh, ReLU };
// "tanh" or "relu".
const char* rnn_nonlinearity_name(RNNNonlinearity n);

// One LSTM layer in one direction over a whole sequence. input [T, B, I] (or packed [N, I] with
// batch_sizes), h0 and c0 [B, H], w_ih [4H, I], w_hh [4H, H], b_ih and b_hh [4H] (both, or both
// undefined for no bias). reverse runs the sequence from its last step to its first (the backward
// direction of a bidirectional LSTM; output[t] is still the state after reading input[t]).
// Returns (output [T, B, H] (packed: [N, H]), h_n [B, H], c_n [B, H]).
std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                                              const Tensor& b_ih, const Tensor& b_hh, bool reverse = false, const Tensor& batch_sizes = Tensor());

// One GRU layer: as lstm_layer with w_ih [3H, I], w_hh [3H, H], b_ih and b_hh [3H] and no cell
// state. Returns (output, h_n).
std::tuple<Tensor, Tensor> gru_layer(const Tensor& input, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                     const Tensor& b_hh, bool reverse = false, const Tensor& batch_sizes = Tensor());

// One Elman RNN layer: as gru_layer with w_ih [H, I], w_hh [H, H], b_ih and b_hh [H].
std::tuple<Tensor, Tensor> rnn_layer(const Tensor& input, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                     const Tensor& b_hh, RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh, bool reverse = false,
                                     const Tensor& batch_sizes = Tensor());

// The same computations written with ordinary differentiable dp ops (a few nodes per step). Slower;
// they are the reference the fused ops are tested against, the graph their create_graph backward
// uses, and what runs on devices without fused kernels.
std::tuple<Tensor, Tensor, Tensor> lstm_layer_composite(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse = false,
                                                        const Tensor& batch_sizes = Tensor());
std::tuple<Tensor, Tensor> gru_layer_composite(const Tensor& input, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                               const Tensor& b_hh, bool reverse = false, const Tensor& batch_sizes = Tensor());
std::tuple<Tensor, Tensor> rnn_layer_composite(const Tensor& input, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                               const Tensor& b_hh, RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh, bool reverse = false,
                                               const Tensor& batch_sizes = Tensor());

// The cells (torch.lstm_cell, gru_cell, rnn_tanh_cell, rnn_relu_cell): one step, one fused node.
// input [B, I], h and c [B, H]; lstm_cell returns (h', c'), the others h'.
std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const Tensor& h, const Tensor& c, const Tensor& w_ih, const Tensor& w_hh,
                                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = Tensor(),
                const Tensor& b_hh = Tensor());
Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = Tensor(),
                     const Tensor& b_hh = Tensor());
Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = Tensor(),
                     const Tensor& b_hh = Tensor());

}  // namespace dp
