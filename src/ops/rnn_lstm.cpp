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
// On CUDA devices the same algorithm runs in cuda/lstm.cpp (cuBLAS GEMMs, fused gate kernels in
// cuda/lstm.cu) on the current stream of the input's device.
#include <algorithm>
#include <array>
#include <vector>

#include "core/kernels/blas.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/elementwise_math.h"
#include "core/kernels/reduce.h"
#include "dp/autograd/function.h"
#include "dp/ops/rnn.h"
#include "ops/common.h"
#include "ops/rnn_internal.h"
#include "amp/autocast_ops.h"
#if DP_HAVE_CUDA
#include "cuda/lstm.h"
#endif

namespace dp {
namespace rnn_detail {

LstmDims check_lstm_layer_args(const char* op, const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                               const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, h0, "h0");
  ops::check_defined(op, c0, "c0");
  ops::check_defined(op, w_ih, "w_ih");
  ops::check_defined(op, w_hh, "w_hh");
  DP_CHECK(b_ih.defined() == b_hh.defined(), ValueError, op, ": b_ih and b_hh must both be given or both be undefined (no bias), got ",
           b_ih.defined() ? "only b_ih" : "only b_hh");
  ops::check_same_device(op, {&input, &h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh});
  if (!input.is_cuda()) kernels::check_cpu_tensor(op, input);  // CUDA: cuda/lstm.cpp
  const DType dt = input.dtype();
  DP_CHECK(dt == kFloat32 || dt == kFloat64, DTypeError, op, ": expected a float32 or float64 input, got ", input.describe());
  const std::pair<const char*, const Tensor*> others[] = {{"h0", &h0}, {"c0", &c0}, {"w_ih", &w_ih}, {"w_hh", &w_hh}, {"b_ih", &b_ih}, {"b_hh", &b_hh}};
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
using kernels::m_tanh;
using kernels::sigmoid_f;
using rnn_detail::BackwardArgs;
using rnn_detail::ForwardBuffers;
using rnn_detail::LstmDims;

// Row-major C[m, n] = op(A) @ op(B) + beta * C (beta 0 or 1), with the degenerate sizes BLAS
// implementations disagree on handled here (k = 0: C = beta * C).
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == T(0))
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, T(0));
    return;
  }
  kernels::blas::gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

#if defined(__GNUC__)
#define DP_RNN_ROW __attribute__((flatten, noinline))
#else
#define DP_RNN_ROW
#endif

// One batch row of one step's forward: the gate pre-activations (i, f, g, o blocks of H) are
// overwritten with the activations; writes c_t and h_t. A function of its own with the math
// inlined (flatten) and no possible aliasing (ivdep), so the loop vectorises.
template <typename T>
DP_RNN_ROW void gates_forward_row(int64_t H, T* gates, const T* c_prev, T* c_out, T* h_out) {
  T* gi = gates;
  T* gf = gates + H;
  T* gg = gates + 2 * H;
  T* go = gates + 3 * H;
#pragma GCC ivdep
  for (int64_t j = 0; j < H; ++j) {
    const T i = sigmoid_f(gi[j]), f = sigmoid_f(gf[j]), g = m_tanh(gg[j]), o = sigmoid_f(go[j]);
    const T c = f * c_prev[j] + i * g;
    gi[j] = i;
    gf[j] = f;
    gg[j] = g;
    go[j] = o;
    c_out[j] = c;
    h_out[j] = o * m_tanh(c);
  }
}

// One step's forward over the batch: gates [B, 4H], c_prev, c_out, h_out [B, H].
template <typename T>
void gates_forward(int64_t B, int64_t H, T* gates, const T* c_prev, T* c_out, T* h_out) {
  for (int64_t b = 0; b < B; ++b) gates_forward_row<T>(H, gates + b * 4 * H, c_prev + b * H, c_out + b * H, h_out + b * H);
}

// One batch row of one step's backward. In: the activations (4 blocks of H), c_t, c_{t-1}, the
// output's gradient at t (HasDOut), the running dh (gradient w.r.t. h_t from later steps) and dc.
// Out: the gate pre-activation gradients (4 blocks); dc becomes the gradient w.r.t. c_{t-1}.
template <typename T, bool HasDOut>
DP_RNN_ROW void gates_backward_row(int64_t H, const T* acts, const T* c_cur, const T* c_prev, const T* d_out, const T* dh, T* dc,
                                   T* dgates) {
  const T* ai = acts;
  const T* af = acts + H;
  const T* ag = acts + 2 * H;
  const T* ao = acts + 3 * H;
  T* di = dgates;
  T* df = dgates + H;
  T* dg = dgates + 2 * H;
  T* dov = dgates + 3 * H;
#pragma GCC ivdep
  for (int64_t j = 0; j < H; ++j) {
    const T i = ai[j], f = af[j], g = ag[j], o = ao[j];
    const T tc = m_tanh(c_cur[j]);
    T dht = dh[j];
    if constexpr (HasDOut) dht += d_out[j];
    const T dct = dc[j] + dht * o * (T(1) - tc * tc);
    di[j] = dct * g * i * (T(1) - i);
    df[j] = dct * c_prev[j] * f * (T(1) - f);
    dg[j] = dct * i * (T(1) - g * g);
    dov[j] = dht * tc * o * (T(1) - o);
    dc[j] = dct * f;
  }
}

template <typename T, bool HasDOut>
void gates_backward(int64_t B, int64_t H, const T* acts, const T* c_cur, const T* c_prev, const T* d_out, const T* dh, T* dc, T* dgates) {
  for (int64_t b = 0; b < B; ++b)
    gates_backward_row<T, HasDOut>(H, acts + b * 4 * H, c_cur + b * H, c_prev + b * H, HasDOut ? d_out + b * H : nullptr, dh + b * H,
                                   dc + b * H, dgates + b * 4 * H);
}

// out[j] = sum over rows of m[rows, n] (the bias gradient).
template <typename T>
void column_sums(int64_t rows, int64_t n, const T* m, T* out) {
  std::fill(out, out + n, T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = m + r * n;
#pragma GCC ivdep
    for (int64_t j = 0; j < n; ++j) out[j] += row[j];
  }
}

template <typename T>
void forward_impl(const LstmDims& d, bool reverse, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                  const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, ForwardBuffers& buf) {
  const int64_t H = d.H, B = d.B, G = 4 * H, BH = B * H, BG = B * G, rows = d.T * B;
  T* gates = buf.gates.data_ptr<T>();
  T* out = buf.out.data_ptr<T>();
  T* cells = buf.cells.data_ptr<T>();
  const T* whh = w_hh.data_ptr<T>();
  T beta = T(0);
  if (d.bias) {
    // Both biases folded into the input projection: each row starts as b_ih + b_hh.
    const T* bi = b_ih.data_ptr<T>();
    const T* bh = b_hh.data_ptr<T>();
    std::vector<T> bsum(static_cast<size_t>(G));
    for (int64_t j = 0; j < G; ++j) bsum[j] = bi[j] + bh[j];
    for (int64_t r = 0; r < rows; ++r) std::copy_n(bsum.data(), G, gates + r * G);
    beta = T(1);
  }
  gemm<T>(false, true, rows, G, d.I, x.data_ptr<T>(), d.I, w_ih.data_ptr<T>(), d.I, beta, gates, G);
  int64_t t = 0;
  for (int64_t s = 0; s < d.T; ++s) {
    t = reverse ? d.T - 1 - s : s;
    const int64_t tp = reverse ? t + 1 : t - 1;
    const T* hp = s == 0 ? h0.data_ptr<T>() : out + tp * BH;
    const T* cp = s == 0 ? c0.data_ptr<T>() : cells + tp * BH;
    T* gt = gates + t * BG;
    gemm<T>(false, true, B, G, H, hp, H, whh, H, T(1), gt, G);
    gates_forward<T>(B, H, gt, cp, cells + t * BH, out + t * BH);
  }
  std::copy_n(out + t * BH, BH, buf.hn.data_ptr<T>());  // (copy_n: the pointers may be null when B = 0)
  std::copy_n(cells + t * BH, BH, buf.cn.data_ptr<T>());
}

template <typename T>
void backward_impl(const LstmDims& d, bool reverse, BackwardArgs& a) {
  const int64_t H = d.H, B = d.B, G = 4 * H, BH = B * H, BG = B * G, rows = d.T * B;
  Tensor dgates_t = make_empty({d.T, B, G}, a.acts.dtype(), a.acts.device());
  T* dG = dgates_t.data_ptr<T>();
  T* dh = a.dh0.data_ptr<T>();
  T* dc = a.dc0.data_ptr<T>();
  if (a.d_hn.defined()) std::copy_n(a.d_hn.data_ptr<T>(), BH, dh);
  else std::fill(dh, dh + BH, T(0));
  if (a.d_cn.defined()) std::copy_n(a.d_cn.data_ptr<T>(), BH, dc);
  else std::fill(dc, dc + BH, T(0));
  const T* acts = a.acts.data_ptr<T>();
  const T* cells = a.cells.data_ptr<T>();
  const T* d_out = a.d_out.defined() ? a.d_out.data_ptr<T>() : nullptr;
  const T* whh = a.w_hh.data_ptr<T>();
  const T* c0 = a.c0.data_ptr<T>();
  for (int64_t s = d.T - 1; s >= 0; --s) {
    const int64_t t = reverse ? d.T - 1 - s : s;
    const int64_t tp = reverse ? t + 1 : t - 1;
    const T* cp = s == 0 ? c0 : cells + tp * BH;
    if (d_out) gates_backward<T, true>(B, H, acts + t * BG, cells + t * BH, cp, d_out + t * BH, dh, dc, dG + t * BG);
    else gates_backward<T, false>(B, H, acts + t * BG, cells + t * BH, cp, nullptr, dh, dc, dG + t * BG);
    if (s > 0 || a.need_dh0) gemm<T>(false, false, B, H, G, dG + t * BG, G, whh, H, T(0), dh, H);
  }
  if (a.dx.defined()) gemm<T>(false, false, rows, d.I, G, dG, G, a.w_ih.data_ptr<T>(), d.I, T(0), a.dx.data_ptr<T>(), d.I);
  if (a.dw_ih.defined()) gemm<T>(true, false, G, d.I, rows, dG, G, a.x.data_ptr<T>(), d.I, T(0), a.dw_ih.data_ptr<T>(), d.I);
  if (a.dw_hh.defined()) {
    // h_prev of step t is output[t -/+ 1] (a contiguous block of T-1 steps) or h0 for the first step.
    T* dw = a.dw_hh.data_ptr<T>();
    const T* out = a.out.data_ptr<T>();
    const int64_t first = reverse ? d.T - 1 : 0;
    const T* dG_rest = reverse ? dG : dG + BG;
    const T* h_rest = reverse ? out + BH : out;
    gemm<T>(true, false, G, H, (d.T - 1) * B, dG_rest, G, h_rest, H, T(0), dw, H);
    gemm<T>(true, false, G, H, B, dG + first * BG, G, a.h0.data_ptr<T>(), H, d.T > 1 ? T(1) : T(0), dw, H);
  }
  if (a.db.defined()) column_sums<T>(rows, G, dG, a.db.data_ptr<T>());
}

Tensor prepared(const Tensor& t, DType dt) {
  if (!t.defined()) return t;
  return kernels::contiguous_nograd(kernels::convert_nograd(t, dt));
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                              const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse) {
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
#if DP_HAVE_CUDA
    if (dev.is_cuda()) cuda::lstm_layer_forward(d, reverse, x, h, c, wi, wh, bi, bh, buf);
    else
#endif
      kernels::dispatch_floating(dt, "lstm_layer", [&]<typename T>() {
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) forward_impl<T>(d, reverse, x, h, c, wi, wh, bi, bh, buf);
      });
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
        "LstmLayerBackward0", {input, h0, c0, w_ih, w_hh, b_ih, b_hh}, {buf.out, buf.hn, buf.cn},
        [=](variable_list&& g) -> variable_list {
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
#if DP_HAVE_CUDA
          if (dev.is_cuda()) cuda::lstm_layer_backward(d, reverse, a);
          else
#endif
            kernels::dispatch_floating(dt, "lstm_layer backward", [&]<typename T>() {
              if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) backward_impl<T>(d, reverse, a);
            });
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
