// The fused recurrent layer ops (gru_layer, rnn_layer, and lstm_layer's CPU path): one autograd
// node per layer and direction, on a padded [T, B, I] sequence or on a packed one.
//
// Both layouts are one: a padded sequence is a packed one whose steps all have B rows. Step t's
// rows are a prefix of the batch (a packed sequence sorts its sequences by decreasing length) at
// row offset(t) of the [N, *] data (backend::RnnSteps).
//
// Forward, G = gates * H (gates: 1 RNN, 4 LSTM, 3 GRU):
//   proj[N, G] = x[N, I] @ W_ih^T + biases                     one GEMM for the whole sequence
//   per step t, over its rows(t) rows:
//     h_prev @ W_hh^T                                          one GEMM (two when a packed step in
//                                                              reverse starts some rows from h0)
//     fused gate loop: the activations overwrite the projections, h_t written into output[t]
// Saved for backward: the output and the activations (LSTM: i, f, g, o and the cell states; GRU: r,
// z, n and W_hn h + b_hn; RNN: nothing more, its derivative comes from the output).
// The RNN projects straight into the output and applies the activation in place.
//
// Backward (BPTT), steps in reverse processing order, a running dh [B, H] (and dc):
//   fused gate loop: dh += d_output[t]; the gate gradients (GRU: of the input and of the hidden
//   projections, which differ in the n block)
//   dh = dgates_h[t] @ W_hh  (GRU: += onto dh * z)                one GEMM per step
// then over the whole sequence: d_input = dgates @ W_ih, dW_ih = dgates^T @ x, dW_hh = dgates_h^T @
// h_prev (h_prev: the output shifted by one step, plus h0; packed: gathered), the biases' column sums.
// Rows a packed step does not carry on from the previous step started from h0 there: their dh at
// that step is dh0's row, which no earlier step touches again.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "backend/capabilities.h"
#include "backend/rnn_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/rnn.h"
#include "ops/common.h"
#include "ops/reduction_helpers.h"
#include "ops/rnn_internal.h"

namespace dp {

const char* rnn_nonlinearity_name(RNNNonlinearity n) { return n == RNNNonlinearity::ReLU ? "relu" : "tanh"; }

namespace rnn_detail {

const char* layer_op_name(RnnCell cell) {
  switch (cell) {
    case RnnCell::LSTM:
      return "lstm_layer";
    case RnnCell::GRU:
      return "gru_layer";
    case RnnCell::Tanh:
    case RnnCell::ReLU:
      break;
  }
  return "rnn_layer";
}

bool has_fused_kernels(const Tensor& t) { return backend::rnn_layer_forward_kernel.has(t.device().type); }

namespace {

// The counts of a packed layout, checked: a 1-D CPU int64 tensor of positive, non-increasing values.
std::vector<int64_t> read_batch_sizes(const char* op, const Tensor& bs) {
  DP_CHECK(bs.dim() == 1 && bs.dtype() == kInt64 && bs.is_cpu(), ValueError, op,
           ": batch_sizes must be a 1-D CPU int64 tensor (PackedSequence::batch_sizes()), got ", bs.describe());
  DP_CHECK(bs.size(0) > 0, ValueError, op, ": batch_sizes is empty (a packed sequence has at least one step)");
  const Tensor c = backend::contiguous_nograd(bs);
  const int64_t* p = c.data_ptr<int64_t>();
  std::vector<int64_t> v(p, p + c.numel());
  for (size_t t = 0; t < v.size(); ++t) {
    DP_CHECK(v[t] > 0, ValueError, op, ": batch_sizes must be positive, got batch_sizes[", t, "] = ", v[t]);
    DP_CHECK(t == 0 || v[t] <= v[t - 1], ValueError, op, ": batch_sizes must not increase, got batch_sizes[", t - 1, "] = ", v[t - 1],
             " and batch_sizes[", t, "] = ", v[t]);
  }
  return v;
}

const char* gates_text(RnnCell cell) { return cell == RnnCell::LSTM ? "4*" : cell == RnnCell::GRU ? "3*" : ""; }

}  // namespace

LayerInfo check_layer_args(const char* op, RnnCell cell, const LayerInputs& in, const Tensor& batch_sizes, bool reverse) {
  const bool lstm = cell == RnnCell::LSTM;
  ops::check_defined(op, in.x, "input");
  ops::check_defined(op, in.h0, "h0");
  if (lstm) ops::check_defined(op, in.c0, "c0");
  ops::check_defined(op, in.w_ih, "w_ih");
  ops::check_defined(op, in.w_hh, "w_hh");
  DP_CHECK(in.b_ih.defined() == in.b_hh.defined(), ValueError, op, ": b_ih and b_hh must both be given or both be undefined (no bias), got ",
           in.b_ih.defined() ? "only b_ih" : "only b_hh");
  ops::check_same_device(op, {&in.x, &in.h0, &in.c0, &in.w_ih, &in.w_hh, &in.b_ih, &in.b_hh});
  if (!backend::capabilities(in.x.device()).kernels) ops::check_cpu_tensor(op, in.x);
  const DType dt = in.x.dtype();
  DP_CHECK(dt == kFloat32 || dt == kFloat64, DTypeError, op, ": expected a float32 or float64 input, got ", in.x.describe());
  const std::pair<const char*, const Tensor*> others[] = {{"h0", &in.h0},     {"c0", &in.c0},     {"w_ih", &in.w_ih},
                                                          {"w_hh", &in.w_hh}, {"b_ih", &in.b_ih}, {"b_hh", &in.b_hh}};
  for (const auto& [name, t] : others) {
    if (!t->defined()) continue;
    DP_CHECK(t->dtype() == dt, DTypeError, op, ": expected ", name, " to have the input's dtype ", dtype_name(dt), ", got ", t->describe());
  }
  LayerInfo info;
  info.packed = batch_sizes.defined();
  int64_t B = 0;
  if (info.packed) {
    DP_CHECK(in.x.dim() == 2, ShapeError, op, ": expected packed input data of shape [N, I] (2-D) with batch_sizes, got ", in.x.size_str());
    std::vector<int64_t> bs = read_batch_sizes(op, batch_sizes);
    int64_t total = 0;
    for (int64_t v : bs) total += v;
    DP_CHECK(total == in.x.size(0), ShapeError, op, ": batch_sizes sum to ", total, " rows but the packed input has ", in.x.size(0), " (input ",
             in.x.size_str(), ")");
    B = bs[0];
    info.steps = RnnSteps::packed(std::move(bs), reverse);
  } else {
    DP_CHECK(in.x.dim() == 3, ShapeError, op, ": expected input of shape [T, B, I] (3-D), got ", in.x.size_str());
    DP_CHECK(in.x.size(0) > 0, ValueError, "Expected sequence length to be larger than 0 in RNN (", op, ": input ", in.x.size_str(), ")");
    B = in.x.size(1);
    info.steps = RnnSteps::dense(in.x.size(0), B, reverse);
  }
  const int64_t gates = backend::rnn_gate_count(cell);
  DP_CHECK(in.w_hh.dim() == 2 && in.w_hh.size(0) == gates * in.w_hh.size(1), ShapeError, op, ": expected w_hh of shape [", gates_text(cell),
           "H, H], got ", in.w_hh.size_str());
  const int64_t H = in.w_hh.size(1), I = in.x.size(-1);
  DP_CHECK(in.w_ih.dim() == 2 && in.w_ih.size(0) == gates * H && in.w_ih.size(1) == I, ShapeError, op, ": expected w_ih of shape [", gates * H, ", ",
           I, "] (", gates_text(cell), "hidden_size, input size), got ", in.w_ih.size_str(), " for input ", in.x.size_str());
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"b_ih", &in.b_ih}, {"b_hh", &in.b_hh}}) {
    if (!t->defined()) continue;
    DP_CHECK(t->dim() == 1 && t->size(0) == gates * H, ShapeError, op, ": expected ", name, " of shape [", gates * H, "], got ", t->size_str());
  }
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"h0", &in.h0}, {"c0", &in.c0}}) {
    if (!t->defined()) continue;
    DP_CHECK(t->dim() == 2 && t->size(0) == B && t->size(1) == H, ShapeError, op, ": expected ", name, " of shape [", B, ", ", H, "] (",
             info.packed ? "batch_sizes[0]" : "batch", ", hidden_size), got ", t->size_str());
  }
  info.I = I;
  info.H = H;
  info.bias = in.b_ih.defined();
  return info;
}

namespace {

using autograd::SavedVariable;
using autograd::variable_list;

Tensor prepared(const Tensor& t, DType dt) {
  if (!t.defined()) return t;
  return backend::contiguous_nograd(backend::convert_nograd(t, dt));
}

const char* node_name(RnnCell cell) {
  switch (cell) {
    case RnnCell::LSTM:
      return "LstmLayerBackward0";
    case RnnCell::GRU:
      return "GruLayerBackward0";
    case RnnCell::ReLU:
      return "RnnReluLayerBackward0";
    case RnnCell::Tanh:
      break;
  }
  return "RnnTanhLayerBackward0";
}

}  // namespace

std::array<Tensor, 3> layer_fused(RnnCell cell, const LayerInputs& in, const LayerInfo& info) {
  const bool lstm = cell == RnnCell::LSTM, gru = cell == RnnCell::GRU;
  const DType dt = in.x.dtype();
  const Device dev = in.x.device();
  const RnnSteps& st = info.steps;
  const int64_t H = info.H, G = backend::rnn_gate_count(cell) * H, N = st.total_rows(), B = st.batch();
  const backend::RnnLayerDims dims{cell, info.I, H, info.bias};
  backend::RnnForwardArgs a;
  a.x = backend::contiguous_nograd(in.x);
  a.h0 = backend::contiguous_nograd(in.h0);
  if (lstm) a.c0 = backend::contiguous_nograd(in.c0);
  a.w_ih = backend::contiguous_nograd(in.w_ih);
  a.w_hh = backend::contiguous_nograd(in.w_hh);
  if (info.bias) {
    a.b_ih = backend::contiguous_nograd(in.b_ih);
    a.b_hh = backend::contiguous_nograd(in.b_hh);
  }
  a.out = info.packed ? make_empty({N, H}, dt, dev) : make_empty({st.steps(), B, H}, dt, dev);
  a.hn = make_empty({B, H}, dt, dev);
  if (lstm) a.cn = make_empty({B, H}, dt, dev);
  if (lstm || gru) {
    a.acts = make_empty({N, G}, dt, dev);
    a.aux = make_empty({N, H}, dt, dev);
  }
  backend::rnn_layer_forward_kernel(dev.type, dims, st, a);

  std::vector<Tensor> inputs = {in.x, in.h0};
  if (lstm) inputs.push_back(in.c0);
  for (const Tensor* t : {&in.w_ih, &in.w_hh, &in.b_ih, &in.b_hh}) inputs.push_back(*t);
  if (autograd::any_needs_grad(inputs)) {
    const Needed needed = {autograd::needs_grad(in.x),    autograd::needs_grad(in.h0),   lstm && autograd::needs_grad(in.c0),
                           autograd::needs_grad(in.w_ih), autograd::needs_grad(in.w_hh), autograd::needs_grad(in.b_ih),
                           autograd::needs_grad(in.b_hh)};
    struct Saved {
      SavedVariable x, h0, c0, w_ih, w_hh, b_ih, b_hh, out;
      Tensor acts, aux;  // private workspace: nothing else can modify it
      LayerInfo info;
    };
    auto sv = std::make_shared<Saved>();
    sv->x = SavedVariable(in.x, false);
    sv->h0 = SavedVariable(in.h0, false);
    sv->c0 = SavedVariable(in.c0, false);
    sv->w_ih = SavedVariable(in.w_ih, false);
    sv->w_hh = SavedVariable(in.w_hh, false);
    sv->b_ih = SavedVariable(in.b_ih, false);
    sv->b_hh = SavedVariable(in.b_hh, false);
    sv->acts = a.acts;
    sv->aux = a.aux;
    sv->info = info;
    std::vector<Tensor> outputs = {a.out, a.hn};
    if (lstm) outputs.push_back(a.cn);
    std::shared_ptr<autograd::Node> node =
        autograd::record(node_name(cell), inputs, outputs, [sv, cell, needed, dt, dev, dims, lstm](variable_list&& g) -> variable_list {
          const Tensor d_cn = lstm ? g[2] : Tensor();
          variable_list grads;
          if (GradMode::is_enabled()) {
            // create_graph: the same gradients from dp ops, so that they can be differentiated again.
            LayerInputs li{sv->x.unpack(),    sv->h0.unpack(),   sv->c0.unpack(),  sv->w_ih.unpack(),
                           sv->w_hh.unpack(), sv->b_ih.unpack(), sv->b_hh.unpack()};
            grads = layer_backward_composite(cell, g[0], g[1], d_cn, li, sv->info, needed);
          } else {
            const int64_t Hh = dims.H, Gg = backend::rnn_gate_count(cell) * Hh, Bb = sv->info.steps.batch();
            backend::RnnBackwardArgs b;
            const Tensor x = sv->x.unpack();
            b.x = prepared(x, dt);
            b.h0 = prepared(sv->h0.unpack(), dt);
            if (lstm) b.c0 = prepared(sv->c0.unpack(), dt);
            b.w_ih = prepared(sv->w_ih.unpack(), dt);
            b.w_hh = prepared(sv->w_hh.unpack(), dt);
            b.out = sv->out.unpack();
            b.acts = sv->acts;
            b.aux = sv->aux;
            b.d_out = prepared(g[0], dt);
            b.d_hn = prepared(g[1], dt);
            b.d_cn = prepared(d_cn, dt);
            b.dh0 = make_empty({Bb, Hh}, dt, dev);
            if (lstm) b.dc0 = make_empty({Bb, Hh}, dt, dev);
            b.need_dh0 = needed[kH0];
            if (needed[kX]) b.dx = make_empty(x.sizes(), dt, dev);
            if (needed[kWih]) b.dw_ih = make_empty({Gg, dims.I}, dt, dev);
            if (needed[kWhh]) b.dw_hh = make_empty({Gg, Hh}, dt, dev);
            if (needed[kBih]) b.db_ih = make_empty({Gg}, dt, dev);
            if (needed[kBhh]) b.db_hh = make_empty({Gg}, dt, dev);
            backend::rnn_layer_backward_kernel(dev.type, dims, sv->info.steps, b);
            grads = {b.dx, needed[kH0] ? b.dh0 : Tensor(), needed[kC0] ? b.dc0 : Tensor(), b.dw_ih, b.dw_hh, b.db_ih, b.db_hh};
          }
          if (!lstm) grads.erase(grads.begin() + kC0);
          return grads;
        });
    // Saved after record() so that it knows its output number (it is the node's output 0).
    sv->out = SavedVariable(a.out, true);
    // Outputs that received no gradient are skipped by the kernels instead of being zero-filled.
    node->materialize_grads = false;
  }
  return {a.out, a.hn, a.cn};
}

}  // namespace rnn_detail

namespace {

using rnn_detail::LayerInputs;
using rnn_detail::RnnCell;

// A GRU or RNN layer: fused kernels where the device has them, else the composite.
std::tuple<Tensor, Tensor> gru_rnn_layer(const char* op, RnnCell cell, const LayerInputs& in, bool reverse, const Tensor& batch_sizes) {
  const rnn_detail::LayerInfo info = rnn_detail::check_layer_args(op, cell, in, batch_sizes, reverse);
  std::array<Tensor, 3> r =
      rnn_detail::has_fused_kernels(in.x) ? rnn_detail::layer_fused(cell, in, info) : rnn_detail::layer_composite(cell, in, info);
  return {r[0], r[1]};
}

RnnCell rnn_cell_of(RNNNonlinearity n) { return n == RNNNonlinearity::ReLU ? RnnCell::ReLU : RnnCell::Tanh; }

// One step of a layer op, for the cells: input [B, I] -> h' [B, H].
Tensor cell_step(const char* op, RnnCell cell, const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                 const Tensor& b_hh) {
  ops::check_defined(op, input, "input");
  DP_CHECK(input.dim() == 2, ShapeError, op, ": expected input of shape [B, I] (2-D), got ", input.size_str());
  auto [out, hn] = gru_rnn_layer(op, cell, LayerInputs{input.unsqueeze(0), hx, Tensor(), w_ih, w_hh, b_ih, b_hh}, false, Tensor());
  return hn;
}

}  // namespace

std::tuple<Tensor, Tensor> gru_layer(const Tensor& input, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                     const Tensor& b_hh, bool reverse, const Tensor& batch_sizes) {
  return gru_rnn_layer("gru_layer", RnnCell::GRU, LayerInputs{input, h0, Tensor(), w_ih, w_hh, b_ih, b_hh}, reverse, batch_sizes);
}

std::tuple<Tensor, Tensor> rnn_layer(const Tensor& input, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                     const Tensor& b_hh, RNNNonlinearity nonlinearity, bool reverse, const Tensor& batch_sizes) {
  return gru_rnn_layer("rnn_layer", rnn_cell_of(nonlinearity), LayerInputs{input, h0, Tensor(), w_ih, w_hh, b_ih, b_hh}, reverse, batch_sizes);
}

Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  return cell_step("gru_cell", RnnCell::GRU, input, hx, w_ih, w_hh, b_ih, b_hh);
}

Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  return cell_step("rnn_tanh_cell", RnnCell::Tanh, input, hx, w_ih, w_hh, b_ih, b_hh);
}

Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  return cell_step("rnn_relu_cell", RnnCell::ReLU, input, hx, w_ih, w_hh, b_ih, b_hh);
}

}  // namespace dp
