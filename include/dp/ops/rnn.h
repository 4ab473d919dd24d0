#pragma once
// Recurrent ops: a whole LSTM layer (one direction) as one differentiable op, and the LSTM cell.
//
// Gate order and formulas are PyTorch's (i, f, g, o):
//   gates = x W_ih^T + b_ih + h W_hh^T + b_hh        split into 4 blocks of H along the last dim
//   i = sigmoid(gates_i), f = sigmoid(gates_f), g = tanh(gates_g), o = sigmoid(gates_o)
//   c' = f * c + i * g,  h' = o * tanh(c')
// float32 and float64, on the CPU and on CUDA (cuBLAS GEMMs and fused gate kernels).
#include <tuple>
#include "dp/core/tensor.h"

namespace dp {

// One LSTM layer in one direction over a whole sequence. input [T, B, I], h0 and c0 [B, H],
// w_ih [4H, I], w_hh [4H, H], b_ih and b_hh [4H] (both, or both undefined for no bias). reverse
// runs the sequence from t = T-1 down to 0 (the backward direction of a bidirectional LSTM; its
// output[t] is still the state after reading input[t]).
// Returns (output [T, B, H], h_n [B, H], c_n [B, H]).
//
// How it runs: the input projection of the whole sequence is one GEMM (both biases folded in),
// then each step is one GEMM for h W_hh^T (accumulated into that step's slice) and one fused gate
// kernel that overwrites the pre-activations with the activations and writes c and h. It is one
// autograd node ("LstmLayerBackward0") whose backward is fused as well: per step one fused kernel
// (gate gradients and the cell gradient) and one GEMM for the hidden gradient; the gradients of
// input and weights are one GEMM each over the whole sequence, the biases one column sum. Under
// create_graph the backward is computed with dp ops instead (lstm_layer_composite's graph), so it
// is differentiable again.
std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                                              const Tensor& b_ih, const Tensor& b_hh, bool reverse = false);

// The same computation written with ordinary differentiable dp ops (a few nodes per step). Slower;
// it is the reference the fused op is tested against, and the graph its create_graph backward uses.
std::tuple<Tensor, Tensor, Tensor> lstm_layer_composite(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse = false);

// torch.lstm_cell: one step. input [B, I], h and c [B, H]; returns (h', c') [B, H]. One fused node.
std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const Tensor& h, const Tensor& c, const Tensor& w_ih, const Tensor& w_hh,
                                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());

}  // namespace dp
