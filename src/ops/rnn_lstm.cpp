// lstm_layer: a whole LSTM layer (one direction) as one autograd node, with fused gate kernels.
//
// On the CPU (and any device with the rnn_layer kernels) it is the generic fused recurrent layer of
// rnn_layer.cpp, padded or packed. On CUDA the padded layer has kernels of its own
// (backend/lstm_kernels.h, below), the CPU's algorithm; a packed one runs the composite form there.
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
// The CUDA kernels (cuda/lstm.cpp: cuBLAS GEMMs, fused gate kernels in cuda/lstm.cu) run on the
// current stream of the input's device.
#include <array>
#include <memory>
#include <tuple>

#include "backend/lstm_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/rnn.h"
#include "ops/common.h"
#include "ops/rnn_internal.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using backend::BackwardArgs;
using backend::ForwardBuffers;
using backend::LstmDims;
using rnn_detail::LayerInfo;
using rnn_detail::LayerInputs;
using rnn_detail::RnnCell;

Tensor prepared(const Tensor& t, DType dt) {
  if (!t.defined()) return t;
  return backend::contiguous_nograd(backend::convert_nograd(t, dt));
}

// The padded layer on a device with the LSTM's own kernels (CUDA): one node, as the generic op.
std::tuple<Tensor, Tensor, Tensor> lstm_layer_device_kernels(const LayerInputs& in, const LayerInfo& info, bool reverse) {
  const Tensor &input = in.x, &h0 = in.h0, &c0 = in.c0, &w_ih = in.w_ih, &w_hh = in.w_hh, &b_ih = in.b_ih, &b_hh = in.b_hh;
  const LstmDims d{info.steps.steps(), info.steps.batch(), info.I, info.H, info.bias};
  const DType dt = input.dtype();
  const Device dev = input.device();
  ForwardBuffers buf;
  buf.gates = make_empty({d.T, d.B, 4 * d.H}, dt, dev);
  buf.out = make_empty({d.T, d.B, d.H}, dt, dev);
  buf.cells = make_empty({d.T, d.B, d.H}, dt, dev);
  buf.hn = make_empty({d.B, d.H}, dt, dev);
  buf.cn = make_empty({d.B, d.H}, dt, dev);
  {
    Tensor x = backend::contiguous_nograd(input), h = backend::contiguous_nograd(h0), c = backend::contiguous_nograd(c0);
    Tensor wi = backend::contiguous_nograd(w_ih), wh = backend::contiguous_nograd(w_hh);
    Tensor bi = d.bias ? backend::contiguous_nograd(b_ih) : Tensor(), bh = d.bias ? backend::contiguous_nograd(b_hh) : Tensor();
    backend::lstm_layer_forward_kernel(dev.type, d, reverse, x, h, c, wi, wh, bi, bh, buf);
  }
  if (autograd::needs_grad(input, h0, c0, w_ih, w_hh, b_ih, b_hh)) {
    const rnn_detail::Needed needed = {autograd::needs_grad(input), autograd::needs_grad(h0),   autograd::needs_grad(c0),  autograd::needs_grad(w_ih),
                                       autograd::needs_grad(w_hh),  autograd::needs_grad(b_ih), autograd::needs_grad(b_hh)};
    SavedVariable s_x(input, false), s_h0(h0, false), s_c0(c0, false), s_wih(w_ih, false), s_whh(w_hh, false);
    SavedVariable s_bih(b_ih, false), s_bhh(b_hh, false);
    Tensor acts = buf.gates, cells = buf.cells;  // private workspace: nothing else can modify it
    auto saved_out = std::make_shared<SavedVariable>();
    std::shared_ptr<autograd::Node> node = autograd::record(
        "LstmLayerBackward0", {input, h0, c0, w_ih, w_hh, b_ih, b_hh}, {buf.out, buf.hn, buf.cn}, [=](variable_list&& g) -> variable_list {
          if (GradMode::is_enabled()) {
            // create_graph: the same gradients from dp ops, so that they can be differentiated again.
            LayerInputs li{s_x.unpack(), s_h0.unpack(), s_c0.unpack(), s_wih.unpack(), s_whh.unpack(), s_bih.unpack(), s_bhh.unpack()};
            return rnn_detail::layer_backward_composite(RnnCell::LSTM, g[0], g[1], g[2], li, info, needed);
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
          backend::lstm_layer_backward_kernel(dev.type, d, reverse, a);
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

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                                              const Tensor& b_ih, const Tensor& b_hh, bool reverse, const Tensor& batch_sizes) {
  const LayerInputs in{input, h0, c0, w_ih, w_hh, b_ih, b_hh};
  const LayerInfo info = rnn_detail::check_layer_args("lstm_layer", RnnCell::LSTM, in, batch_sizes, reverse);
  if (rnn_detail::has_fused_kernels(input)) {
    auto r = rnn_detail::layer_fused(RnnCell::LSTM, in, info);
    return {r[0], r[1], r[2]};
  }
  if (!info.packed && backend::lstm_layer_forward_kernel.has(input.device().type)) return lstm_layer_device_kernels(in, info, reverse);
  auto r = rnn_detail::layer_composite(RnnCell::LSTM, in, info);
  return {r[0], r[1], r[2]};
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
