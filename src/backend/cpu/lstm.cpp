// The CPU backend's fused LSTM layer (backend/lstm_kernels.h): OpenBLAS GEMMs and gate loops
// written to vectorise; the algorithm is described in src/ops/rnn_lstm.cpp.
#include <algorithm>
#include <type_traits>
#include <vector>
#include "backend/lstm_kernels.h"
#include "backend/cpu/blas.h"
#include "backend/dispatch.h"
#include "backend/elementwise_math.h"

namespace dp::backend {
namespace {

using kernels::m_tanh;
using kernels::sigmoid_f;

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
DP_RNN_ROW void gates_backward_row(int64_t H, const T* acts, const T* c_cur, const T* c_prev, const T* d_out, const T* dh, T* dc, T* dgates) {
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
    gates_backward_row<T, HasDOut>(H, acts + b * 4 * H, c_cur + b * H, c_prev + b * H, HasDOut ? d_out + b * H : nullptr, dh + b * H, dc + b * H,
                                   dgates + b * 4 * H);
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
void forward_impl(const LstmDims& d, bool reverse, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                  const Tensor& b_ih, const Tensor& b_hh, ForwardBuffers& buf) {
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
  if (a.d_hn.defined())
    std::copy_n(a.d_hn.data_ptr<T>(), BH, dh);
  else
    std::fill(dh, dh + BH, T(0));
  if (a.d_cn.defined())
    std::copy_n(a.d_cn.data_ptr<T>(), BH, dc);
  else
    std::fill(dc, dc + BH, T(0));
  const T* acts = a.acts.data_ptr<T>();
  const T* cells = a.cells.data_ptr<T>();
  const T* d_out = a.d_out.defined() ? a.d_out.data_ptr<T>() : nullptr;
  const T* whh = a.w_hh.data_ptr<T>();
  const T* c0 = a.c0.data_ptr<T>();
  for (int64_t s = d.T - 1; s >= 0; --s) {
    const int64_t t = reverse ? d.T - 1 - s : s;
    const int64_t tp = reverse ? t + 1 : t - 1;
    const T* cp = s == 0 ? c0 : cells + tp * BH;
    if (d_out)
      gates_backward<T, true>(B, H, acts + t * BG, cells + t * BH, cp, d_out + t * BH, dh, dc, dG + t * BG);
    else
      gates_backward<T, false>(B, H, acts + t * BG, cells + t * BH, cp, nullptr, dh, dc, dG + t * BG);
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

void lstm_layer_forward_cpu(const LstmDims& d, bool reverse, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                            const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, ForwardBuffers& buf) {
  kernels::dispatch_floating(x.dtype(), "lstm_layer", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) forward_impl<T>(d, reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, buf);
  });
}

void lstm_layer_backward_cpu(const LstmDims& d, bool reverse, BackwardArgs& a) {
  kernels::dispatch_floating(a.acts.dtype(), "lstm_layer backward", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) backward_impl<T>(d, reverse, a);
  });
}

}  // namespace

void register_cpu_lstm_kernels() {
  lstm_layer_forward.set(DeviceType::CPU, &lstm_layer_forward_cpu);
  lstm_layer_backward.set(DeviceType::CPU, &lstm_layer_backward_cpu);
}

}  // namespace dp::backend
