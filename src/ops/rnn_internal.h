#pragma once
// Shared by the LSTM ops (rnn_lstm.cpp: the fused op; rnn_composite.cpp: the dp-op version;
// cuda/lstm.cpp: the fused op on CUDA devices).
#include <array>
#include "dp/autograd/node.h"
#include "dp/core/tensor.h"

namespace dp::rnn_detail {

// Sizes of one lstm_layer call, after its arguments were checked.
struct LstmDims {
  int64_t T, B, I, H;
  bool bias;
};

// The fused op's buffers (rnn_lstm.cpp on the CPU, cuda/lstm.cpp on CUDA devices): all contiguous.
struct ForwardBuffers {
  Tensor gates, out, cells, hn, cn;  // gates [T, B, 4H] (activations after the run), cells [T, B, H]
};
struct BackwardArgs {
  Tensor x, h0, c0, w_ih, w_hh, acts, cells, out;  // contiguous
  Tensor d_out, d_hn, d_cn;                         // contiguous, may be undefined
  Tensor dx, dh0, dc0, dw_ih, dw_hh, db;            // outputs; dx/dw_ih/dw_hh/db undefined if not needed
  bool need_dh0 = false;
};

// Checks lstm_layer's arguments (defined, CPU or CUDA, float32/float64, one dtype, one device, shapes)
// and returns the sizes; errors name `op` and the offending shapes, dtypes or devices.
LstmDims check_lstm_layer_args(const char* op, const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                               const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh);

// The gradients of lstm_layer w.r.t. its 7 inputs (input, h0, c0, w_ih, w_hh, b_ih, b_hh), written
// with dp ops on a recomputed forward so that they are differentiable (create_graph). Incoming
// gradients may be undefined (none arrived). `needed[k]` false gives an undefined gradient.
autograd::variable_list lstm_layer_backward_composite(const Tensor& d_out, const Tensor& d_hn, const Tensor& d_cn, const Tensor& input,
                                                      const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                                                      const Tensor& b_ih, const Tensor& b_hh, bool reverse,
                                                      const std::array<bool, 7>& needed);

}  // namespace dp::rnn_detail
