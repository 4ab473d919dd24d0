#pragma once
// Shared by the recurrent layer ops (rnn_layer.cpp: the fused ops; rnn_lstm.cpp: the LSTM's entry
// points and its CUDA kernels; rnn_composite.cpp: the dp-op form).
#include <array>
#include <vector>
#include "backend/rnn_kernels.h"
#include "dp/autograd/node.h"
#include "dp/core/tensor.h"

namespace dp::rnn_detail {

using backend::RnnCell;
using backend::RnnSteps;

// One layer call's tensors. x is [T, B, I] (padded) or [N, I] (packed); c0 only for the LSTM;
// b_ih / b_hh both undefined without bias.
struct LayerInputs {
  Tensor x, h0, c0, w_ih, w_hh, b_ih, b_hh;
};

// The sizes of a checked call.
struct LayerInfo {
  RnnSteps steps;
  int64_t I = 0, H = 0;
  bool bias = false;
  bool packed = false;
};

// Gradient slots, in this order for every cell (c0's slot unused but by the LSTM).
enum Slot { kX = 0, kH0, kC0, kWih, kWhh, kBih, kBhh };
using Needed = std::array<bool, 7>;

// "lstm_layer", "gru_layer", "rnn_layer".
const char* layer_op_name(RnnCell cell);

// Checks a layer call's arguments (defined, float32/float64, one dtype, one device, shapes; the
// packed layout: batch_sizes a 1-D CPU int64 tensor of positive, non-increasing counts summing to
// the data's rows) and returns the sizes; errors name `op` and the offending shapes, dtypes or
// devices.
LayerInfo check_layer_args(const char* op, RnnCell cell, const LayerInputs& in, const Tensor& batch_sizes, bool reverse);

// The layer as dp ops: (output, h_n, c_n (LSTM; else undefined)).
std::array<Tensor, 3> layer_composite(RnnCell cell, const LayerInputs& in, const LayerInfo& info);

// The gradients w.r.t. the 7 slots, written with dp ops on a recomputed forward so that they are
// differentiable (create_graph). Incoming gradients may be undefined (none arrived); `needed[k]`
// false gives an undefined gradient.
autograd::variable_list layer_backward_composite(RnnCell cell, const Tensor& d_out, const Tensor& d_hn, const Tensor& d_cn, const LayerInputs& in,
                                                 const LayerInfo& info, const Needed& needed);

// The fused layer op on a device with the rnn_layer kernels (one node). Returns (output, h_n, c_n).
std::array<Tensor, 3> layer_fused(RnnCell cell, const LayerInputs& in, const LayerInfo& info);

// Whether the device of t has the fused rnn_layer kernels.
bool has_fused_kernels(const Tensor& t);

}  // namespace dp::rnn_detail
