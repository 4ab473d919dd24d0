// The CPU backend's fused recurrent layers (backend/rnn_kernels.h): RNN (tanh, ReLU), LSTM and GRU,
// on padded or packed sequences. OpenBLAS GEMMs and gate loops written to vectorise; the algorithm
// is described in src/ops/rnn_layer.cpp.
#include <algorithm>
#include <type_traits>
#include <vector>
#include "backend/rnn_kernels.h"
#include "backend/cpu/blas.h"
#include "backend/dispatch.h"
#include "backend/elementwise_math.h"

namespace dp::backend::cpu {
namespace {

using backend::m_tanh;
using backend::sigmoid_f;

// Row-major C[m, n] = op(A) @ op(B) + beta * C (beta 0 or 1), with the degenerate sizes BLAS
// implementations disagree on handled here (k = 0: C = beta * C).
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k == 0) {
    if (beta == T(0))
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, T(0));
    return;
  }
  backend::cpu::blas::gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

#if defined(__GNUC__)
#define DP_RNN_ROW __attribute__((flatten, noinline))
#else
#define DP_RNN_ROW
#endif

// ------------------------------------------------------------------------------------ gate loops
// Each is one batch row of one step, a function of its own with the math inlined (flatten) and no
// possible aliasing (ivdep), so that its loop vectorises.

// LSTM forward: the pre-activations (i, f, g, o blocks of H) are overwritten with the activations;
// writes c_t and h_t.
template <typename T>
DP_RNN_ROW void lstm_forward_row(int64_t H, T* gates, const T* c_prev, T* c_out, T* h_out) {
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

// LSTM backward. In: the activations, c_t, c_{t-1}, the output's gradient at t (HasDOut), the
// running dh (gradient w.r.t. h_t from later steps) and dc. Out: the gate pre-activation gradients;
// dc becomes the gradient w.r.t. c_{t-1}.
template <typename T, bool HasDOut>
DP_RNN_ROW void lstm_backward_row(int64_t H, const T* acts, const T* c_cur, const T* c_prev, const T* d_out, const T* dh, T* dc, T* dgates) {
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

// GRU forward. acts holds the input projections (r, z, n blocks; b_ih and b_hr, b_hz folded in), gh
// the hidden projections W_h* h (no bias). Writes r, z, n over acts, W_hn h + b_hn to hn_out and
// h_t = n + z * (h_{t-1} - n) (PyTorch's CPU form).
template <typename T>
DP_RNN_ROW void gru_forward_row(int64_t H, T* acts, const T* gh, const T* b_hn, const T* h_prev, T* hn_out, T* h_out) {
  T* ar = acts;
  T* az = acts + H;
  T* an = acts + 2 * H;
  const T* hr = gh;
  const T* hz = gh + H;
  const T* hh = gh + 2 * H;
#pragma GCC ivdep
  for (int64_t j = 0; j < H; ++j) {
    const T r = sigmoid_f(ar[j] + hr[j]), z = sigmoid_f(az[j] + hz[j]);
    const T hn = hh[j] + b_hn[j];
    const T n = m_tanh(an[j] + r * hn);
    ar[j] = r;
    az[j] = z;
    an[j] = n;
    hn_out[j] = hn;
    h_out[j] = n + z * (h_prev[j] - n);
  }
}

// GRU backward. dh is the running gradient w.r.t. h_t; it becomes its direct part towards h_{t-1}
// (dh * z), to which the caller adds dgh @ W_hh. dgx: the gradients of the input projections
// (r, z, n), dgh: of the hidden projections (r, z, and the n block r * dn').
template <typename T, bool HasDOut>
DP_RNN_ROW void gru_backward_row(int64_t H, const T* acts, const T* hn, const T* h_prev, const T* d_out, T* dh, T* dgx, T* dgh) {
  const T* ar = acts;
  const T* az = acts + H;
  const T* an = acts + 2 * H;
#pragma GCC ivdep
  for (int64_t j = 0; j < H; ++j) {
    const T r = ar[j], z = az[j], n = an[j];
    T dht = dh[j];
    if constexpr (HasDOut) dht += d_out[j];
    const T dpn = dht * (T(1) - z) * (T(1) - n * n);
    const T dpr = dpn * hn[j] * r * (T(1) - r);
    const T dpz = dht * (h_prev[j] - n) * z * (T(1) - z);
    dgx[j] = dpr;
    dgx[H + j] = dpz;
    dgx[2 * H + j] = dpn;
    dgh[j] = dpr;
    dgh[H + j] = dpz;
    dgh[2 * H + j] = dpn * r;
    dh[j] = dht * z;
  }
}

// RNN: the activation over a step's rows, in place (count = rows * H).
template <typename T, bool Relu>
DP_RNN_ROW void rnn_activation(int64_t count, T* y) {
#pragma GCC ivdep
  for (int64_t k = 0; k < count; ++k) {
    if constexpr (Relu)
      y[k] = y[k] < T(0) ? T(0) : y[k];  // (NaN stays NaN, as torch.relu)
    else
      y[k] = m_tanh(y[k]);
  }
}

// RNN backward over a step's rows: dpre = (dh + d_out) * act'(y), from the output y.
template <typename T, bool Relu, bool HasDOut>
DP_RNN_ROW void rnn_backward_rows(int64_t count, const T* y, const T* d_out, const T* dh, T* dpre) {
#pragma GCC ivdep
  for (int64_t k = 0; k < count; ++k) {
    T g = dh[k];
    if constexpr (HasDOut) g += d_out[k];
    if constexpr (Relu)
      dpre[k] = y[k] > T(0) ? g : T(0);
    else
      dpre[k] = g * (T(1) - y[k] * y[k]);
  }
}

// out[j] = sum over rows of m[rows, n] (the bias gradients).
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
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// ---------------------------------------------------------------------------------------- forward

template <typename T>
void forward_impl(const RnnLayerDims& d, const RnnSteps& st, RnnForwardArgs& a) {
  const RnnCell cell = d.cell;
  const bool lstm = cell == RnnCell::LSTM, gru = cell == RnnCell::GRU;
  const int64_t H = d.H, I = d.I, G = rnn_gate_count(cell) * H, N = st.total_rows(), B = st.batch();
  T* out = a.out.data_ptr<T>();
  // The input projection of the whole sequence, one GEMM, into the gates (LSTM, GRU) or straight
  // into the output (RNN: its pre-activations become the output in place).
  T* proj = lstm || gru ? a.acts.data_ptr<T>() : out;
  std::vector<T> b_hn(gru ? static_cast<size_t>(H) : 0, T(0));
  T beta = T(0);
  if (d.bias) {
    // Biases folded into the projection: b_ih + b_hh (GRU: b_hn stays apart, inside r * (...)).
    const T* bi = a.b_ih.data_ptr<T>();
    const T* bh = a.b_hh.data_ptr<T>();
    std::vector<T> bsum(static_cast<size_t>(G));
    for (int64_t j = 0; j < G; ++j) bsum[j] = bi[j] + (gru && j >= 2 * H ? T(0) : bh[j]);
    if (gru) std::copy_n(bh + 2 * H, H, b_hn.data());
    for (int64_t r = 0; r < N; ++r) std::copy_n(bsum.data(), G, proj + r * G);
    beta = T(1);
  }
  gemm<T>(false, true, N, G, I, ptr_or_null<T>(a.x), I, a.w_ih.data_ptr<T>(), I, beta, proj, G);

  const T* whh = a.w_hh.data_ptr<T>();
  const T* h0 = ptr_or_null<T>(a.h0);
  const T* c0 = lstm ? ptr_or_null<T>(a.c0) : nullptr;
  T* aux = lstm || gru ? ptr_or_null<T>(a.aux) : nullptr;  // LSTM: cells; GRU: W_hn h + b_hn
  T* hn = ptr_or_null<T>(a.hn);
  T* cn = lstm ? ptr_or_null<T>(a.cn) : nullptr;
  std::vector<T> gh(gru ? static_cast<size_t>(B * G) : 0);  // GRU: one step's W_hh h
  for (int64_t s = 0; s < st.steps(); ++s) {
    const int64_t t = st.time(s), n = st.rows(t), nc = st.carried(t), o = st.offset(t);
    const int64_t po = nc > 0 ? st.offset(st.prev_time(t)) : 0;
    const T* hp = out + po * H;  // rows [0, nc) of the previous step; rows [nc, n) start from h0
    // The hidden projection: accumulated into the step's gates (LSTM, RNN), or apart (GRU).
    T* dst = gru ? gh.data() : proj + o * G;
    const T hb = gru ? T(0) : T(1);
    if (nc > 0) gemm<T>(false, true, nc, G, H, hp, H, whh, H, hb, dst, G);
    if (nc < n) gemm<T>(false, true, n - nc, G, H, h0 + nc * H, H, whh, H, hb, dst + nc * G, G);
    T* ho = out + o * H;
    switch (cell) {
      case RnnCell::Tanh:
        rnn_activation<T, false>(n * H, ho);
        break;
      case RnnCell::ReLU:
        rnn_activation<T, true>(n * H, ho);
        break;
      case RnnCell::LSTM:
        for (int64_t r = 0; r < n; ++r) {
          const T* cp = r < nc ? aux + (po + r) * H : c0 + r * H;
          lstm_forward_row<T>(H, proj + (o + r) * G, cp, aux + (o + r) * H, ho + r * H);
        }
        break;
      case RnnCell::GRU:
        for (int64_t r = 0; r < n; ++r) {
          const T* hpr = r < nc ? hp + r * H : h0 + r * H;
          gru_forward_row<T>(H, proj + (o + r) * G, gh.data() + r * G, b_hn.data(), hpr, aux + (o + r) * H, ho + r * H);
        }
        break;
    }
    // Rows whose sequence ends at this step hold their final state.
    const int64_t f = st.first_final(t);
    if (f < n) {
      std::copy_n(ho + f * H, (n - f) * H, hn + f * H);
      if (lstm) std::copy_n(aux + (o + f) * H, (n - f) * H, cn + f * H);
    }
  }
}

// --------------------------------------------------------------------------------------- backward

template <typename T>
void backward_impl(const RnnLayerDims& d, const RnnSteps& st, RnnBackwardArgs& a) {
  const RnnCell cell = d.cell;
  const bool lstm = cell == RnnCell::LSTM, gru = cell == RnnCell::GRU;
  const int64_t H = d.H, I = d.I, G = rnn_gate_count(cell) * H, N = st.total_rows(), B = st.batch();
  const DType dt = a.out.dtype();
  // Gate pre-activation gradients of the whole sequence: w.r.t. the input projection (dgx) and the
  // hidden projection (dgh; the same tensor except for the GRU, whose n block differs).
  Tensor dgx_t = make_empty({N, G}, dt, a.out.device());
  Tensor dgh_t = gru ? make_empty({N, G}, dt, a.out.device()) : dgx_t;
  T* dgx = ptr_or_null<T>(dgx_t);
  T* dgh = ptr_or_null<T>(dgh_t);
  T* dh = ptr_or_null<T>(a.dh0);  // running gradient w.r.t. the state; ends as dh0
  T* dc = lstm ? ptr_or_null<T>(a.dc0) : nullptr;
  if (a.d_hn.defined())
    std::copy_n(a.d_hn.data_ptr<T>(), B * H, dh);
  else
    std::fill(dh, dh + B * H, T(0));
  if (lstm) {
    if (a.d_cn.defined())
      std::copy_n(a.d_cn.data_ptr<T>(), B * H, dc);
    else
      std::fill(dc, dc + B * H, T(0));
  }
  const T* out = a.out.data_ptr<T>();
  const T* acts = lstm || gru ? a.acts.data_ptr<T>() : nullptr;
  const T* aux = lstm || gru ? ptr_or_null<T>(a.aux) : nullptr;
  const T* d_out = ptr_or_null<T>(a.d_out);
  const T* whh = a.w_hh.data_ptr<T>();
  const T* h0 = ptr_or_null<T>(a.h0);
  const T* c0 = lstm ? ptr_or_null<T>(a.c0) : nullptr;
  // Row r of step t reads dh[r]: for a row that continues into the step run after t, the previous
  // iteration's GEMM wrote it; a row whose sequence ends at t still holds d_hn (no later step has
  // that row). Rows that start at t keep dh0 / dc0 once t is done: no earlier step has them.
  for (int64_t s = st.steps() - 1; s >= 0; --s) {
    const int64_t t = st.time(s), n = st.rows(t), nc = st.carried(t), o = st.offset(t);
    const int64_t po = nc > 0 ? st.offset(st.prev_time(t)) : 0;
    const T* dor = d_out ? d_out + o * H : nullptr;
    switch (cell) {
      case RnnCell::Tanh:
      case RnnCell::ReLU: {
        const bool relu = cell == RnnCell::ReLU;
        if (relu && dor) rnn_backward_rows<T, true, true>(n * H, out + o * H, dor, dh, dgx + o * G);
        if (relu && !dor) rnn_backward_rows<T, true, false>(n * H, out + o * H, nullptr, dh, dgx + o * G);
        if (!relu && dor) rnn_backward_rows<T, false, true>(n * H, out + o * H, dor, dh, dgx + o * G);
        if (!relu && !dor) rnn_backward_rows<T, false, false>(n * H, out + o * H, nullptr, dh, dgx + o * G);
        break;
      }
      case RnnCell::LSTM:
        for (int64_t r = 0; r < n; ++r) {
          const T* cp = r < nc ? aux + (po + r) * H : c0 + r * H;
          const int64_t row = o + r;
          if (dor)
            lstm_backward_row<T, true>(H, acts + row * G, aux + row * H, cp, dor + r * H, dh + r * H, dc + r * H, dgx + row * G);
          else
            lstm_backward_row<T, false>(H, acts + row * G, aux + row * H, cp, nullptr, dh + r * H, dc + r * H, dgx + row * G);
        }
        break;
      case RnnCell::GRU:
        for (int64_t r = 0; r < n; ++r) {
          const T* hpr = r < nc ? out + (po + r) * H : h0 + r * H;
          const int64_t row = o + r;
          if (dor)
            gru_backward_row<T, true>(H, acts + row * G, aux + row * H, hpr, dor + r * H, dh + r * H, dgx + row * G, dgh + row * G);
          else
            gru_backward_row<T, false>(H, acts + row * G, aux + row * H, hpr, nullptr, dh + r * H, dgx + row * G, dgh + row * G);
        }
        break;
    }
    // The gradient w.r.t. the state the step read: rows [0, nc) for the step before, the others dh0.
    const int64_t m = a.need_dh0 ? n : nc;
    gemm<T>(false, false, m, H, G, dgh + o * G, G, whh, H, gru ? T(1) : T(0), dh, H);
  }
  // Whole-sequence products.
  if (a.dx.defined()) gemm<T>(false, false, N, I, G, dgx, G, a.w_ih.data_ptr<T>(), I, T(0), a.dx.data_ptr<T>(), I);
  if (a.dw_ih.defined()) gemm<T>(true, false, G, I, N, dgx, G, ptr_or_null<T>(a.x), I, T(0), a.dw_ih.data_ptr<T>(), I);
  if (a.dw_hh.defined()) {
    T* dw = a.dw_hh.data_ptr<T>();
    const int64_t T_ = st.steps();
    if (st.dense()) {
      // h_prev of step t is output[t -/+ 1] (a contiguous block of T-1 steps) or h0 for the first step.
      const int64_t first = st.reverse() ? T_ - 1 : 0;
      const T* dg_rest = st.reverse() ? dgh : dgh + B * G;
      const T* h_rest = st.reverse() ? out + B * H : out;
      gemm<T>(true, false, G, H, (T_ - 1) * B, dg_rest, G, h_rest, H, T(0), dw, H);
      gemm<T>(true, false, G, H, B, dgh + first * B * G, G, h0, H, T_ > 1 ? T(1) : T(0), dw, H);
    } else {
      // Packed: the rows' previous states gathered into one [N, H] matrix, then one GEMM.
      std::vector<T> hprev(static_cast<size_t>(N * H));
      for (int64_t t = 0; t < T_; ++t) {
        const int64_t n = st.rows(t), nc = st.carried(t), o = st.offset(t);
        if (nc > 0) std::copy_n(out + st.offset(st.prev_time(t)) * H, nc * H, hprev.data() + o * H);
        if (nc < n) std::copy_n(h0 + nc * H, (n - nc) * H, hprev.data() + (o + nc) * H);
      }
      gemm<T>(true, false, G, H, N, dgh, G, hprev.data(), H, T(0), dw, H);
    }
  }
  if (a.db_ih.defined()) column_sums<T>(N, G, dgx, a.db_ih.data_ptr<T>());
  if (a.db_hh.defined()) {
    if (gru || !a.db_ih.defined())
      column_sums<T>(N, G, dgh, a.db_hh.data_ptr<T>());
    else
      std::copy_n(a.db_ih.data_ptr<T>(), G, a.db_hh.data_ptr<T>());
  }
}

void rnn_layer_forward_kernel(const RnnLayerDims& d, const RnnSteps& steps, RnnForwardArgs& a) {
  backend::dispatch_floating(a.out.dtype(), "rnn_layer", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) forward_impl<T>(d, steps, a);
  });
}

void rnn_layer_backward_kernel(const RnnLayerDims& d, const RnnSteps& steps, RnnBackwardArgs& a) {
  backend::dispatch_floating(a.out.dtype(), "rnn_layer backward", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) backward_impl<T>(d, steps, a);
  });
}

}  // namespace

void register_rnn_kernels() {
  DP_REGISTER_KERNEL(CPU, rnn_layer_forward_kernel);
  DP_REGISTER_KERNEL(CPU, rnn_layer_backward_kernel);
}

}  // namespace dp::backend::cpu
