// lstm_layer: a whole LSTM layer (one direction) as one autograd node, with fused gate kernels.
//
// Forward, for a sequence of T steps, batch B, hidden H (G = 4H gate rows):
//   gates[T*B, G] = x[T*B, I] @ W_ih^T + (b_ih + b_hh)          one GEMM for the whole sequence
//   per step t:  gates[t] += h_{t-1} @ W_hh^T                    one GEMM, accumulated in place
//                fused kernel: gates[t] <- (i, f, g, o) activations, c_t, h_t = output[t]
// The activations overwrite the pre-activations, so the saved workspace is gates [T, B, G] plus the
// cell states [T, B, H]; tanh(c_t) is recomputed in backward (cheaper than storing it).
//
// Backward (BPTT), steps in reverse processing order, dh/dc running [B, H] buffers:
//   fused kernel: dh += d_output[t]; dgates[t] and dc <- dc * f from the saved activations
//   dh = dgates[t] @ W_hh                                        one GEMM per step
// then over the whole sequence: d_input = dgates @ W_ih, dW_ih = dgates^T @ x, dW_hh = dgates^T @
// h_prev (two GEMMs: h_prev is output shifted by one step, plus h0), db = column sums of dgates.
//
// The kernels are the backends' (backend/lstm_kernels.h): on the CPU src/backend/cpu/lstm.cpp, on
// CUDA devices cuda/lstm.cpp (cuBLAS GEMMs, fused gate kernels in cuda/lstm.cu) on the current
// stream of the input's device.
#include <algorithm>
#include <array>
#include <vector>

#include "backend/capabilities.h"
#include "backend/lstm_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/rnn.h"
#include "ops/common.h"
#include "ops/reduction_helpers.h"
#include "ops/rnn_internal.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace rnn_detail {

LstmDims check_lstm_layer_args(const char* op, const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                               const Tensor& b_ih, const Tensor& b_hh) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, h0, "h0");
  ops::check_defined(op, c0, "c0");
  ops::check_defined(op, w_ih, "w_ih");
  ops::check_defined(op, w_hh, "w_hh");
  DP_CHECK(b_ih.defined() == b_hh.defined(), ValueError, op, ": b_ih and b_hh must both be given or both be undefined (no bias), got ",
           b_ih.defined() ? "only b_ih" : "only b_hh");
  ops::check_same_device(op, {&input, &h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh});
  if (!backend::capabilities(input.device()).kernels) kernels::check_cpu_tensor(op, input);
  const DType dt = input.dtype();
  DP_CHECK(dt == kFloat32 || dt == kFloat64, DTypeError, op, ": expected a float32 or float64 input, got ", input.describe());
  const std::pair<const char*, const Tensor*> others[] = {{"h0", &h0},     {"c0", &c0},     {"w_ih", &w_ih},
                                                          {"w_hh", &w_hh}, {"b_ih", &b_ih}, {"b_hh", &b_hh}};
  for (const auto& [name, t] : others) {
    if (!t->defined()) continue;
    DP_CHECK(t->dtype() == dt, DTypeError, op, ": expected ", name, " to have the input's dtype ", dtype_name(dt), ", got ", t->describe());
  }
  DP_CHECK(input.dim() == 3, ShapeError, op, ": expected input of shape [T, B, I] (3-D), got ", input.size_str());
  DP_CHECK(input.size(0) > 0, ValueError, "Expected sequence length to be larger than 0 in RNN (", op, ": input ", input.size_str(), ")");
  DP_CHECK(w_hh.dim() == 2 && w_hh.size(0) == 4 * w_hh.size(1), ShapeError, op, ": expected w_hh of shape [4*H, H], got ", w_hh.size_str());
  const int64_t H = w_hh.size(1), B = input.size(1), I = input.size(2);
  DP_CHECK(w_ih.dim() == 2 && w_ih.size(0) == 4 * H && w_ih.size(1) == I, ShapeError, op, ": expected w_ih of shape [", 4 * H, ", ", I,
           "] (4*hidden_size, input size), got ", w_ih.size_str(), " for input ", input.size_str());
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"b_ih", &b_ih}, {"b_hh", &b_hh}}) {
    if (!t->defined()) continue;
    DP_CHECK(t->dim() == 1 && t->size(0) == 4 * H, ShapeError, op, ": expected ", name, " of shape [", 4 * H, "], got ", t->size_str());
  }
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"h0", &h0}, {"c0", &c0}}) {
    DP_CHECK(t->dim() == 2 && t->size(0) == B && t->size(1) == H, ShapeError, op, ": expected ", name, " of shape [", B, ", ", H,
             "] (batch, hidden_size), got ", t->size_str());
  }
  return LstmDims{input.size(0), B, I, H, b_ih.defined()};
}

}  // namespace rnn_detail

namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using rnn_detail::BackwardArgs;
using rnn_detail::ForwardBuffers;
using rnn_detail::LstmDims;

Tensor prepared(const Tensor& t, DType dt) {
  if (!t.defined()) return t;
  return kernels::contiguous_nograd(kernels::convert_nograd(t, dt));
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                                              const Tensor& b_ih, const Tensor& b_hh, bool reverse) {
  const LstmDims d = rnn_detail::check_lstm_layer_args("lstm_layer", input, h0, c0, w_ih, w_hh, b_ih, b_hh);
  const DType dt = input.dtype();
  const Device dev = input.device();
  ForwardBuffers buf;
  buf.gates = make_empty({d.T, d.B, 4 * d.H}, dt, dev);
  buf.out = make_empty({d.T, d.B, d.H}, dt, dev);
  buf.cells = make_empty({d.T, d.B, d.H}, dt, dev);
  buf.hn = make_empty({d.B, d.H}, dt, dev);
  buf.cn = make_empty({d.B, d.H}, dt, dev);
  {
    Tensor x = kernels::contiguous_nograd(input), h = kernels::contiguous_nograd(h0), c = kernels::contiguous_nograd(c0);
    Tensor wi = kernels::contiguous_nograd(w_ih), wh = kernels::contiguous_nograd(w_hh);
    Tensor bi = d.bias ? kernels::contiguous_nograd(b_ih) : Tensor(), bh = d.bias ? kernels::contiguous_nograd(b_hh) : Tensor();
    backend::lstm_layer_forward(dev.type, d, reverse, x, h, c, wi, wh, bi, bh, buf);
  }
  if (autograd::needs_grad(input, h0, c0, w_ih, w_hh, b_ih, b_hh)) {
    const std::array<bool, 7> needed = {autograd::needs_grad(input), autograd::needs_grad(h0),   autograd::needs_grad(c0),
                                        autograd::needs_grad(w_ih),  autograd::needs_grad(w_hh), autograd::needs_grad(b_ih),
                                        autograd::needs_grad(b_hh)};
    SavedVariable s_x(input, false), s_h0(h0, false), s_c0(c0, false), s_wih(w_ih, false), s_whh(w_hh, false);
    SavedVariable s_bih(b_ih, false), s_bhh(b_hh, false);
    Tensor acts = buf.gates, cells = buf.cells;  // private workspace: nothing else can modify it
    auto saved_out = std::make_shared<SavedVariable>();
    std::shared_ptr<autograd::Node> node = autograd::record(
        "LstmLayerBackward0", {input, h0, c0, w_ih, w_hh, b_ih, b_hh}, {buf.out, buf.hn, buf.cn}, [=](variable_list&& g) -> variable_list {
          if (GradMode::is_enabled()) {
            // create_graph: the same gradients from dp ops, so that they can be differentiated again.
            return rnn_detail::lstm_layer_backward_composite(g[0], g[1], g[2], s_x.unpack(), s_h0.unpack(), s_c0.unpack(), s_wih.unpack(),
                                                             s_whh.unpack(), s_bih.unpack(), s_bhh.unpack(), reverse, needed);
          }
          BackwardArgs a;
          a.x = prepared(s_x.unpack(), dt);
          a.h0 = prepared(s_h0.unpack(), dt);
          a.c0 = prepared(s_c0.unpack(), dt);
          a.w_ih = prepared(s_wih.unpack(), dt);
          a.w_hh = prepared(s_whh.unpack(), dt);
          a.out = saved_out->unpack();
          a.acts = acts;
          a.cells = cells;
          a.d_out = prepared(g[0], dt);
          a.d_hn = prepared(g[1], dt);
          a.d_cn = prepared(g[2], dt);
          a.dh0 = make_empty({d.B, d.H}, dt, dev);
          a.dc0 = make_empty({d.B, d.H}, dt, dev);
          a.need_dh0 = needed[1];
          if (needed[0]) a.dx = make_empty({d.T, d.B, d.I}, dt, dev);
          if (needed[3]) a.dw_ih = make_empty({4 * d.H, d.I}, dt, dev);
          if (needed[4]) a.dw_hh = make_empty({4 * d.H, d.H}, dt, dev);
          if (needed[5] || needed[6]) a.db = make_empty({4 * d.H}, dt, dev);
          backend::lstm_layer_backward(dev.type, d, reverse, a);
          Tensor db_hh;
          if (needed[6]) db_hh = needed[5] ? a.db.clone() : a.db;  // two distinct gradients, equal values
          return {a.dx, needed[1] ? a.dh0 : Tensor(), needed[2] ? a.dc0 : Tensor(), a.dw_ih, a.dw_hh, needed[5] ? a.db : Tensor(), db_hh};
        });
    // Saved after record() so that it knows its output number (it is the node's output 0).
    *saved_out = SavedVariable(buf.out, true);
    // Outputs that received no gradient are skipped by the kernels instead of being zero-filled.
    node->materialize_grads = false;
  }
  return {buf.out, buf.hn, buf.cn};
}

std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const Tensor& h, const Tensor& c, const Tensor& w_ih, const Tensor& w_hh,
                                     const Tensor& b_ih, const Tensor& b_hh) {
  if (autocast::detail::Cast ac{autocast::detail::Op::lstm_cell, {&input, &h, &c, &w_ih, &w_hh, &b_ih, &b_hh}})
    return ac([&] { return dp::lstm_cell(ac[0], ac[1], ac[2], ac[3], ac[4], ac[5], ac[6]); });
  ops::check_defined("lstm_cell", input, "input");
  DP_CHECK(input.dim() == 2, ShapeError, "lstm_cell: expected input of shape [B, I] (2-D), got ", input.size_str());
  // One step of the layer op: one node, and the fused kernels.
  auto [out, hn, cn] = lstm_layer(input.unsqueeze(0), h, c, w_ih, w_hh, b_ih, b_hh, false);
  return {hn, cn};
}

}  // namespace dp
