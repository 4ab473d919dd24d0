#pragma once
// Shared by the LSTM ops (rnn_lstm.cpp: the fused op; rnn_composite.cpp: the dp-op version).
#include <array>
#include "backend/lstm_kernels.h"
#include "dp/autograd/node.h"
#include "dp/core/tensor.h"

namespace dp::rnn_detail {

// The fused kernels' sizes and buffers (backend/lstm_kernels.h).
using backend::BackwardArgs;
using backend::ForwardBuffers;
using backend::LstmDims;

// Checks lstm_layer's arguments (defined, CPU or CUDA, float32/float64, one dtype, one device, shapes)
// and returns the sizes; errors name `op` and the offending shapes, dtypes or devices.
LstmDims check_lstm_layer_args(const char* op, const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                               const Tensor& b_ih, const Tensor& b_hh);

// The gradients of lstm_layer w.r.t. its 7 inputs (input, h0, c0, w_ih, w_hh, b_ih, b_hh), written
// with dp ops on a recomputed forward so that they are differentiable (create_graph). Incoming
// gradients may be undefined (none arrived). `needed[k]` false gives an undefined gradient.
autograd::variable_list lstm_layer_backward_composite(const Tensor& d_out, const Tensor& d_hn, const Tensor& d_cn, const Tensor& input,
                                                      const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                                      const Tensor& b_hh, bool reverse, const std::array<bool, 7>& needed);

}  // namespace dp::rnn_detail
