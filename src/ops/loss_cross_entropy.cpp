// cross_entropy: log_softmax over the class dim fused with nll_loss (class-index targets) or with a
// dot against class probabilities, label smoothing included, in PyTorch's formulas:
//   indices:       loss_i = (1 - ls) * w[t] * (lse - x_t) + ls / C * sum_c w[c] * (lse - x_c)
//                  (0 for ignored samples), Mean divides by sum of w[t] over non-ignored samples;
//   probabilities: loss_i = sum_c w[c] * q_c * (lse - x_c), q = (1 - ls) * target + ls / C,
//                  Mean divides by the number of samples;
// with lse = log sum_c exp(x_c), computed as max + log(sum exp(x - max)). Only lse (and, for
// probabilities, sum_c w[c] q_c) per sample is kept for backward, not the log-probabilities:
//   d/dx_c = G * (S * p_c - coef_c), p = exp(x - lse),
//   indices:       coef_c = (1 - ls) * w[t] * [c == t] + ls / C * w[c], S = sum_c coef_c;
//   probabilities: coef_c = w[c] * q_c,                                 S = sum_c coef_c;
//   d/dtarget_c = G * (1 - ls) * w[c] * (lse - x_c)   (probabilities only).
// Layout: input seen as [N, C, S]. S == 1 (the usual [N, C]): per row, a max pass, an exp pass
// (vectorised, into an L1 scratch row) and, with smoothing, a weighted sum pass; S > 1: the same
// passes run down C over blocks of contiguous positions, vectorised across positions.
// Under create_graph the backward is the same formula with dp ops (softmax of the saved input).
// On a CUDA device the passes are the kernels of cuda/loss.h (one warp per sample for [N, C]).
#include <algorithm>
#include <vector>
#include "core/kernels/reduce_vec.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "ops/loss_common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using kernels::exp_diff;
using kernels::row_max;
using loss::ClassGeometry;

constexpr const char* kOp = "cross_entropy";
constexpr int64_t kBlock = 256;  // positions per block when S > 1

// sum_j f(j) with 16 partial sums (vectorisable), combined pairwise.
template <typename T, typename F>
inline T lane_sum(int64_t n, F f) {
  T s[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; ++k) s[k] += f(j + k);
  T r = 0;
  for (; j < n; ++j) r += f(j);
  return kernels::combine16(s) + r;
}

struct Params {
  ClassGeometry geo;
  double eps = 0;  // label smoothing
  int64_t ignore = -100;
};

// ---------------------------------------------------------------- class-index targets

template <typename T, typename I>
double index_forward(const T* x, const I* tg, const T* w, T wsum, const Params& p, T* out, T* lse, double& tw) {
  const int64_t C = p.geo.c, S = p.geo.s;
  const T eps = static_cast<T>(p.eps), keep = static_cast<T>(1.0 - p.eps), per_class = static_cast<T>(p.eps / static_cast<double>(C));
  double sum = 0, wtot = 0;
  if (S == 1) {
    std::vector<T> scratch(static_cast<size_t>(C));
    for (int64_t i = 0; i < p.geo.n; ++i) {
      const int64_t t = static_cast<int64_t>(tg[i]);
      if (t == p.ignore) {
        if (out) out[i] = T(0);
        lse[i] = T(0);
        continue;
      }
      if (t < 0 || t >= C) [[unlikely]] loss::throw_target_out_of_bounds(kOp, t, C, p.ignore);
      const T* xr = x + i * C;
      const T m = row_max(xr, C);
      const T ls = std::log(exp_diff<T, true>(xr, nullptr, m, scratch.data(), C));
      const T wt = w ? w[t] : T(1);
      T v = keep * wt * ((m - xr[t]) + ls);
      if (eps > T(0)) {
        const T sd = w ? lane_sum<T>(C, [&](int64_t c) { return w[c] * (m - xr[c]); })
                       : lane_sum<T>(C, [&](int64_t c) { return m - xr[c]; });
        v += per_class * (sd + ls * wsum);
      }
      lse[i] = m + ls;
      if (out) out[i] = v;
      sum += static_cast<double>(v);
      wtot += static_cast<double>(wt);
    }
  } else {
    T mx[kBlock], tmp[kBlock];
    double acc[kBlock], sd[kBlock];
    for (int64_t n = 0; n < p.geo.n; ++n) {
      for (int64_t s0 = 0; s0 < S; s0 += kBlock) {
        const int64_t bn = std::min(kBlock, S - s0);
        const T* xb = x + n * C * S + s0;
        for (int64_t j = 0; j < bn; ++j) mx[j] = C > 0 ? xb[j] : -std::numeric_limits<T>::infinity();
        for (int64_t c = 1; c < C; ++c) {
          const T* xr = xb + c * S;
          for (int64_t j = 0; j < bn; ++j) mx[j] = std::max(mx[j], xr[j]);
        }
        for (int64_t j = 0; j < bn; ++j) acc[j] = sd[j] = 0;
        for (int64_t c = 0; c < C; ++c) {
          const T* xr = xb + c * S;
          exp_diff<T, false>(xr, mx, T(0), tmp, bn);
          for (int64_t j = 0; j < bn; ++j) acc[j] += static_cast<double>(tmp[j]);
          if (eps > T(0)) {
            const double wc = w ? static_cast<double>(w[c]) : 1.0;
            for (int64_t j = 0; j < bn; ++j) sd[j] += wc * static_cast<double>(mx[j] - xr[j]);
          }
        }
        for (int64_t j = 0; j < bn; ++j) {
          const int64_t i = n * S + s0 + j;
          const T ls = static_cast<T>(std::log(acc[j]));
          lse[i] = mx[j] + ls;
          const int64_t t = static_cast<int64_t>(tg[i]);
          if (t == p.ignore) {
            if (out) out[i] = T(0);
            continue;
          }
          if (t < 0 || t >= C) [[unlikely]] loss::throw_target_out_of_bounds(kOp, t, C, p.ignore);
          const T wt = w ? w[t] : T(1);
          T v = keep * wt * ((mx[j] - xb[t * S + j]) + ls);
          if (eps > T(0)) v += per_class * (static_cast<T>(sd[j]) + ls * wsum);
          if (out) out[i] = v;
          sum += static_cast<double>(v);
          wtot += static_cast<double>(wt);
        }
      }
    }
  }
  tw = wtot;
  return sum;
}

// gi = G * (S_i * p - coef) with G = g[i] (per-sample) or gs (reduced, scaled); 0 for ignored.
template <typename T, typename I>
void index_backward(T* gi, const T* x, const I* tg, const T* w, T wsum, const Params& p, const T* lse, const T* g, T gs) {
  const int64_t C = p.geo.c, S = p.geo.s;
  const T eps = static_cast<T>(p.eps), keep = static_cast<T>(1.0 - p.eps), per_class = static_cast<T>(p.eps / static_cast<double>(C));
  if (S == 1) {
    for (int64_t i = 0; i < p.geo.n; ++i) {
      T* gr = gi + i * C;
      const int64_t t = static_cast<int64_t>(tg[i]);
      if (t == p.ignore || t < 0 || t >= C) {
        std::fill(gr, gr + C, T(0));
        continue;
      }
      const T G = g ? g[i] : gs;
      const T wt = w ? w[t] : T(1);
      const T a = G * (keep * wt + per_class * wsum);
      const T* xr = x + i * C;
      exp_diff<T, false>(xr, nullptr, lse[i], gr, C);
      if (eps > T(0)) {
        const T b = G * per_class;
        if (w) {
          for (int64_t c = 0; c < C; ++c) gr[c] = a * gr[c] - b * w[c];
        } else {
          for (int64_t c = 0; c < C; ++c) gr[c] = a * gr[c] - b;
        }
      } else {
        for (int64_t c = 0; c < C; ++c) gr[c] *= a;
      }
      gr[t] -= G * keep * wt;
    }
    return;
  }
  T a[kBlock], b[kBlock], lb[kBlock];
  for (int64_t n = 0; n < p.geo.n; ++n) {
    for (int64_t s0 = 0; s0 < S; s0 += kBlock) {
      const int64_t bn = std::min(kBlock, S - s0);
      const T* xb = x + n * C * S + s0;
      T* gb = gi + n * C * S + s0;
      for (int64_t j = 0; j < bn; ++j) {
        const int64_t i = n * S + s0 + j;
        const int64_t t = static_cast<int64_t>(tg[i]);
        lb[j] = lse[i];
        if (t == p.ignore || t < 0 || t >= C) {
          a[j] = b[j] = T(0);
          continue;
        }
        const T G = g ? g[i] : gs;
        a[j] = G * (keep * (w ? w[t] : T(1)) + per_class * wsum);
        b[j] = G * per_class;
      }
      for (int64_t c = 0; c < C; ++c) {
        T* gr = gb + c * S;
        exp_diff<T, false>(xb + c * S, lb, T(0), gr, bn);
        const T wc = w ? w[c] : T(1);
        for (int64_t j = 0; j < bn; ++j) gr[j] = a[j] * gr[j] - b[j] * wc;
      }
      for (int64_t j = 0; j < bn; ++j) {
        const int64_t i = n * S + s0 + j;
        const int64_t t = static_cast<int64_t>(tg[i]);
        if (t == p.ignore || t < 0 || t >= C) continue;
        const T G = g ? g[i] : gs;
        gb[t * S + j] -= G * keep * (w ? w[t] : T(1));
      }
    }
  }
}

// ---------------------------------------------------------------- class-probability targets

// Per sample also stores rs[i] = sum_c w[c] q_c (the S of the backward).
template <typename T>
double prob_forward(const T* x, const T* tq, const T* w, const Params& p, T* out, T* lse, T* rs) {
  const int64_t C = p.geo.c, S = p.geo.s;
  const T keep = static_cast<T>(1.0 - p.eps), per_class = static_cast<T>(p.eps / static_cast<double>(C));
  double sum = 0;
  if (S == 1) {
    std::vector<T> scratch(static_cast<size_t>(C));
    for (int64_t i = 0; i < p.geo.n; ++i) {
      const T* xr = x + i * C;
      const T* tr = tq + i * C;
      const T m = row_max(xr, C);
      const T ls = std::log(exp_diff<T, true>(xr, nullptr, m, scratch.data(), C));
      T swq, swqd;
      if (w) {
        swq = lane_sum<T>(C, [&](int64_t c) { return w[c] * (keep * tr[c] + per_class); });
        swqd = lane_sum<T>(C, [&](int64_t c) { return w[c] * (keep * tr[c] + per_class) * (m - xr[c]); });
      } else {
        swq = lane_sum<T>(C, [&](int64_t c) { return keep * tr[c] + per_class; });
        swqd = lane_sum<T>(C, [&](int64_t c) { return (keep * tr[c] + per_class) * (m - xr[c]); });
      }
      const T v = swqd + ls * swq;
      lse[i] = m + ls;
      rs[i] = swq;
      if (out) out[i] = v;
      sum += static_cast<double>(v);
    }
    return sum;
  }
  T mx[kBlock], tmp[kBlock];
  double acc[kBlock], swq[kBlock], swqd[kBlock];
  for (int64_t n = 0; n < p.geo.n; ++n) {
    for (int64_t s0 = 0; s0 < S; s0 += kBlock) {
      const int64_t bn = std::min(kBlock, S - s0);
      const T* xb = x + n * C * S + s0;
      const T* tb = tq + n * C * S + s0;
      for (int64_t j = 0; j < bn; ++j) mx[j] = C > 0 ? xb[j] : -std::numeric_limits<T>::infinity();
      for (int64_t c = 1; c < C; ++c) {
        const T* xr = xb + c * S;
        for (int64_t j = 0; j < bn; ++j) mx[j] = std::max(mx[j], xr[j]);
      }
      for (int64_t j = 0; j < bn; ++j) acc[j] = swq[j] = swqd[j] = 0;
      for (int64_t c = 0; c < C; ++c) {
        const T* xr = xb + c * S;
        const T* tr = tb + c * S;
        exp_diff<T, false>(xr, mx, T(0), tmp, bn);
        const T wc = w ? w[c] : T(1);
        for (int64_t j = 0; j < bn; ++j) {
          const T wq = wc * (keep * tr[j] + per_class);
          acc[j] += static_cast<double>(tmp[j]);
          swq[j] += static_cast<double>(wq);
          swqd[j] += static_cast<double>(wq * (mx[j] - xr[j]));
        }
      }
      for (int64_t j = 0; j < bn; ++j) {
        const int64_t i = n * S + s0 + j;
        const T ls = static_cast<T>(std::log(acc[j]));
        const T v = static_cast<T>(swqd[j]) + ls * static_cast<T>(swq[j]);
        lse[i] = mx[j] + ls;
        rs[i] = static_cast<T>(swq[j]);
        if (out) out[i] = v;
        sum += static_cast<double>(v);
      }
    }
  }
  return sum;
}

// gi = G * (rs * p - w q), gt = G * (1 - ls) * w * (lse - x); either may be null.
template <typename T>
void prob_backward(T* gi, T* gt, const T* x, const T* tq, const T* w, const Params& p, const T* lse, const T* rs, const T* g, T gs) {
  const int64_t C = p.geo.c, S = p.geo.s;
  const T keep = static_cast<T>(1.0 - p.eps), per_class = static_cast<T>(p.eps / static_cast<double>(C));
  if (S == 1) {
    for (int64_t i = 0; i < p.geo.n; ++i) {
      const T G = g ? g[i] : gs;
      const T* xr = x + i * C;
      const T* tr = tq + i * C;
      const T l = lse[i];
      if (gi) {
        T* gr = gi + i * C;
        exp_diff<T, false>(xr, nullptr, l, gr, C);
        const T a = G * rs[i];
        if (w) {
          for (int64_t c = 0; c < C; ++c) gr[c] = a * gr[c] - G * w[c] * (keep * tr[c] + per_class);
        } else {
          for (int64_t c = 0; c < C; ++c) gr[c] = a * gr[c] - G * (keep * tr[c] + per_class);
        }
      }
      if (gt) {
        T* gr = gt + i * C;
        const T f = G * keep;
        if (w) {
          for (int64_t c = 0; c < C; ++c) gr[c] = f * w[c] * (l - xr[c]);
        } else {
          for (int64_t c = 0; c < C; ++c) gr[c] = f * (l - xr[c]);
        }
      }
    }
    return;
  }
  T a[kBlock], G[kBlock], lb[kBlock];
  for (int64_t n = 0; n < p.geo.n; ++n) {
    for (int64_t s0 = 0; s0 < S; s0 += kBlock) {
      const int64_t bn = std::min(kBlock, S - s0);
      const int64_t base = n * C * S + s0;
      for (int64_t j = 0; j < bn; ++j) {
        const int64_t i = n * S + s0 + j;
        G[j] = g ? g[i] : gs;
        a[j] = G[j] * rs[i];
        lb[j] = lse[i];
      }
      for (int64_t c = 0; c < C; ++c) {
        const T* xr = x + base + c * S;
        const T* tr = tq + base + c * S;
        const T wc = w ? w[c] : T(1);
        if (gi) {
          T* gr = gi + base + c * S;
          exp_diff<T, false>(xr, lb, T(0), gr, bn);
          for (int64_t j = 0; j < bn; ++j) gr[j] = a[j] * gr[j] - G[j] * wc * (keep * tr[j] + per_class);
        }
        if (gt) {
          T* gr = gt + base + c * S;
          for (int64_t j = 0; j < bn; ++j) gr[j] = G[j] * keep * wc * (lb[j] - xr[j]);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- dispatch helpers

template <typename F>
void dispatch_real(DType d, F&& f) {
  kernels::dispatch_floating(d, kOp, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) f.template operator()<T>();
  });
}

template <typename F>
void dispatch_index(DType x, DType t, F&& f) {
  dispatch_real(x, [&]<typename T>() {
    if (t == kUInt8) f.template operator()<T, uint8_t>();
    else f.template operator()<T, int64_t>();
  });
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

double weight_sum(const Tensor& w, int64_t C) {
  if (!w.defined()) return static_cast<double>(C);
  double s = 0;
  for (double v : w.to_vector<double>()) s += v;
  return s;
}

// The per-sample or reduced gradient, ready for the kernels: a contiguous per-sample tensor (None)
// or a scaled value.
struct GradIn {
  Tensor per_sample;
  double value = 0;
};

GradIn grad_in(const Tensor& g, Reduction red, double scale, DType dtype) {
  GradIn r;
  if (red == Reduction::None) r.per_sample = loss::plain(g, dtype);
  else r.value = loss::scalar_value(g) * scale;
  return r;
}

// The constants of the create_graph backward, grad = G * (B * softmax(x) - A): A (input-shaped) =
// coef, B (per sample) = its sum over classes; 0 for ignored samples. Host tensors.
void build_coefs(const Tensor& A, const Tensor& B, const Tensor& tt, const Tensor& w, const Params& p, double wsum) {
  dispatch_index(A.dtype(), tt.dtype(), [&]<typename T, typename I>() {
    T* a = static_cast<T*>(A.data_ptr());
    T* b = static_cast<T*>(B.data_ptr());
    const T* wp = ptr_or_null<T>(w);
    const I* tg = static_cast<const I*>(tt.data_ptr());
    const int64_t C = p.geo.c, S = p.geo.s;
    const T keep = static_cast<T>(1.0 - p.eps), per_class = static_cast<T>(p.eps / static_cast<double>(C));
    for (int64_t n = 0; n < p.geo.n; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = n * S + s;
        const int64_t tv = static_cast<int64_t>(tg[i]);
        const bool on = tv != p.ignore && tv >= 0 && tv < C;
        for (int64_t c = 0; c < C; ++c) a[(n * C + c) * S + s] = on ? per_class * (wp ? wp[c] : T(1)) : T(0);
        if (!on) {
          b[i] = T(0);
          continue;
        }
        const T wt = wp ? wp[tv] : T(1);
        a[(n * C + tv) * S + s] += keep * wt;
        b[i] = keep * wt + per_class * static_cast<T>(wsum);
      }
  });
}

// The class-probability backward with dp ops (create_graph): differentiable again.
variable_list prob_backward_composite(const Tensor& g, const Tensor& xi, const Tensor& ti, const Tensor& w, const Params& p, Reduction red,
                                      double scale, bool need_x, bool need_t) {
  const int64_t cd = p.geo.class_dim;
  Tensor wb;
  if (w.defined()) {
    Shape ws(xi.dim(), 1);
    ws[cd] = p.geo.c;
    wb = w.reshape(ws);
  }
  Tensor gb = red == Reduction::None ? loss::per_sample_to_input(g, p.geo) : dp::mul(g, scale);
  Tensor gx, gt;
  if (need_x) {
    Tensor q = dp::add(dp::mul(ti, 1.0 - p.eps), p.eps / static_cast<double>(p.geo.c));
    Tensor wq = wb.defined() ? dp::mul(q, wb) : q;
    Tensor s = dp::sum(wq, {cd}, true);
    gx = dp::mul(gb, dp::sub(dp::mul(dp::softmax(xi, cd), s), wq));
  }
  if (need_t) {
    gt = dp::mul(dp::mul(gb, dp::log_softmax(xi, cd)), -(1.0 - p.eps));
    if (wb.defined()) gt = dp::mul(gt, wb);
  }
  return variable_list{gx, gt};
}

// ---------------------------------------------------------------- CUDA

// Records the probability-target backward: the composite when a graph of the gradient is wanted,
// else `fused(gi, gt, g, xc, tc, scale)` (the CPU or CUDA kernel) on contiguous inputs into fresh
// gradients (undefined where not needed).
template <typename Fused>
void record_prob_backward(const Tensor& input, const Tensor& target, const Tensor& out, const Tensor& w, const Params& p, Reduction red,
                          int64_t samples, Fused fused) {
  const bool need_x = autograd::needs_grad(input), need_t = autograd::needs_grad(target);
  if (!need_x && !need_t) return;
  SavedVariable sx(input, false), st(target, false);
  autograd::record("CrossEntropyLossBackward0", {input, target}, {out},
                   [sx, st, w, p, red, samples, need_x, need_t, fused](variable_list&& grads) {
                     const Tensor& g = grads[0];
                     const Tensor xi = sx.unpack(), ti = st.unpack();
                     const double scale = red == Reduction::Mean ? 1.0 / static_cast<double>(samples) : 1.0;
                     if (GradMode::is_enabled()) return prob_backward_composite(g, xi, ti, w, p, red, scale, need_x, need_t);
                     const Tensor xc = kernels::contiguous_nograd(xi), tc = kernels::contiguous_nograd(ti);
                     Tensor gi = need_x ? make_empty(xc.sizes(), xc.dtype(), xc.device()) : Tensor();
                     Tensor gt = need_t ? make_empty(xc.sizes(), xc.dtype(), xc.device()) : Tensor();
                     fused(gi, gt, g, xc, tc, scale);
                     return variable_list{gi, gt};
                   });
}

#if DP_HAVE_CUDA
// The kernels of cuda/loss.h. Per-sample log-sum-exps (and, for probabilities, sum_c w_c q_c) are
// saved in float32 (float64 for float64 inputs); Mean's total weight stays on the device. Under
// create_graph the backward is the CPU's dp-op formula; for class indices its constants are built
// on the host from copies of the targets and weights (a wait, in that rare path only).

cuda::ClassShape class_shape(const ClassGeometry& geo) { return cuda::ClassShape{geo.n, geo.c, geo.s}; }

Tensor cross_entropy_index_cuda(const Tensor& input, const Tensor& t, const Tensor& w, const Params& p, Reduction red) {
  const Tensor x = kernels::contiguous_nograd(input);
  const bool reduced = red != Reduction::None;
  const DType acc = cuda::loss_acc_dtype(x.dtype());
  Tensor out = make_empty(reduced ? Shape{} : p.geo.out_shape, x.dtype(), x.device());
  Tensor tw = reduced ? make_empty({}, acc, x.device()) : Tensor();
  Tensor lse = make_empty({p.geo.n * p.geo.s}, acc, x.device());
  if (cuda::cross_entropy_index_forward(out, red, tw, lse, x, t, w, class_shape(p.geo), p.ignore, p.eps))
    loss::throw_first_bad_target(kOp, t, p.geo.c, p.ignore);
  if (autograd::needs_grad(input)) {
    SavedVariable sx(input, false), st(t, false);
    autograd::record("CrossEntropyLossBackward0", {input}, {out}, [sx, st, w, lse, tw, p, red](variable_list&& grads) {
      const Tensor& g = grads[0];
      const Tensor xi = sx.unpack(), tt = st.unpack();
      if (GradMode::is_enabled()) {
        const Tensor wh = w.defined() ? kernels::convert_nograd(w.cpu(), kFloat64) : Tensor();
        Tensor A = make_empty(xi.sizes(), kFloat64, Device::cpu());
        Tensor B = make_empty(p.geo.out_shape, kFloat64, Device::cpu());
        build_coefs(A, B, tt.cpu(), wh, p, p.eps > 0 ? weight_sum(wh, p.geo.c) : 0.0);
        A = A.to(xi.device(), xi.dtype());
        B = B.to(xi.device(), xi.dtype());
        Tensor gb = red == Reduction::None ? loss::per_sample_to_input(g, p.geo)
                    : red == Reduction::Mean ? dp::div(g, kernels::convert_nograd(tw, g.dtype()))
                                             : g;
        Tensor sm = dp::softmax(xi, p.geo.class_dim);
        return variable_list{dp::mul(gb, dp::sub(dp::mul(loss::per_sample_to_input(B, p.geo), sm), A))};
      }
      const Tensor xc = kernels::contiguous_nograd(xi);
      Tensor gi = make_empty(xc.sizes(), xc.dtype(), xc.device());
      cuda::LossGrad lg;
      lg.g = loss::plain(g, xc.dtype());
      lg.per_sample = red == Reduction::None;
      if (red == Reduction::Mean) lg.divisor = tw;
      cuda::cross_entropy_index_backward(gi, lg, xc, tt, w, lse, class_shape(p.geo), p.ignore, p.eps);
      return variable_list{gi};
    });
  }
  return out;
}

Tensor cross_entropy_prob_cuda(const Tensor& input, const Tensor& target, const Tensor& w, const Params& p, Reduction red) {
  const Tensor x = kernels::contiguous_nograd(input);
  const Tensor t = kernels::contiguous_nograd(target);
  const int64_t samples = p.geo.n * p.geo.s;
  const DType acc = cuda::loss_acc_dtype(x.dtype());
  const bool reduced = red != Reduction::None;
  Tensor out = make_empty(reduced ? Shape{} : p.geo.out_shape, x.dtype(), x.device());
  Tensor lse = make_empty({samples}, acc, x.device());
  Tensor rs = make_empty({samples}, acc, x.device());
  // PyTorch: the mean over samples, NaN for an empty input.
  const double scale = red != Reduction::Mean ? 1.0 : x.numel() == 0 ? std::nan("") : 1.0 / static_cast<double>(samples);
  cuda::cross_entropy_prob_forward(out, reduced, scale, lse, rs, x, t, w, class_shape(p.geo), p.eps);
  record_prob_backward(input, target, out, w, p, red, samples,
                       [=](const Tensor& gi, const Tensor& gt, const Tensor& g, const Tensor& xc, const Tensor& tc, double scale) {
                         cuda::LossGrad lg;
                         lg.g = loss::plain(g, xc.dtype());
                         lg.per_sample = red == Reduction::None;
                         lg.scale = scale;
                         cuda::cross_entropy_prob_backward(gi, gt, lg, xc, tc, w, lse, rs, class_shape(p.geo), p.eps);
                       });
  return out;
}
#endif

// ---------------------------------------------------------------- the op, class indices

Tensor cross_entropy_index(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index, Reduction red,
                           double eps) {
  loss::check_class_target_dtype(kOp, target);
  Params p;
  p.geo = loss::class_geometry(kOp, input, target);
  p.eps = eps;
  p.ignore = ignore_index;
  loss::check_class_weight(kOp, input, weight, p.geo.c);

  const Tensor t = kernels::contiguous_nograd(target);
  const Tensor w = weight.defined() ? kernels::contiguous_nograd(weight) : Tensor();
#if DP_HAVE_CUDA
  if (input.is_cuda()) return cross_entropy_index_cuda(input, t, w, p, red);
#endif
  const Tensor x = kernels::contiguous_nograd(input);
  const double wsum = eps > 0 ? weight_sum(w, p.geo.c) : 0.0;
  Tensor out = red == Reduction::None ? make_empty(p.geo.out_shape, x.dtype(), x.device()) : Tensor();
  Tensor lse = make_empty({p.geo.n * p.geo.s}, x.dtype(), x.device());
  double tw = 0, total = 0;
  dispatch_index(x.dtype(), t.dtype(), [&]<typename T, typename I>() {
    total = index_forward<T, I>(static_cast<const T*>(x.data_ptr()), static_cast<const I*>(t.data_ptr()), ptr_or_null<T>(w),
                                static_cast<T>(wsum), p, out.defined() ? static_cast<T*>(out.data_ptr()) : nullptr,
                                static_cast<T*>(lse.data_ptr()), tw);
  });
  if (red == Reduction::Mean) out = loss::scalar_result(total / tw, x.dtype(), x.device());
  else if (red == Reduction::Sum) out = loss::scalar_result(total, x.dtype(), x.device());

  if (autograd::needs_grad(input)) {
    SavedVariable sx(input, false), st(t, false);
    autograd::record("CrossEntropyLossBackward0", {input}, {out}, [sx, st, w, lse, p, red, tw, wsum](variable_list&& grads) {
      const Tensor& g = grads[0];
      const Tensor xi = sx.unpack(), tt = st.unpack();
      const double scale = red == Reduction::Mean ? 1.0 / tw : 1.0;
      if (GradMode::is_enabled()) {
        // grad = G * (B * softmax(x) - A) with the constants A (coef) and B (its per-sample sum).
        Tensor A = make_empty(xi.sizes(), xi.dtype(), xi.device());
        Tensor B = make_empty(p.geo.out_shape, xi.dtype(), xi.device());
        build_coefs(A, B, tt, w, p, wsum);
        Tensor gb = red == Reduction::None ? loss::per_sample_to_input(g, p.geo) : dp::mul(g, scale);
        Tensor sm = dp::softmax(xi, p.geo.class_dim);
        return variable_list{dp::mul(gb, dp::sub(dp::mul(loss::per_sample_to_input(B, p.geo), sm), A))};
      }
      const Tensor xc = kernels::contiguous_nograd(xi);
      Tensor gi = make_empty(xc.sizes(), xc.dtype(), xc.device());
      const GradIn gin = grad_in(g, red, scale, xc.dtype());
      dispatch_index(xc.dtype(), tt.dtype(), [&]<typename T, typename I>() {
        index_backward<T, I>(static_cast<T*>(gi.data_ptr()), static_cast<const T*>(xc.data_ptr()), static_cast<const I*>(tt.data_ptr()),
                             ptr_or_null<T>(w), static_cast<T>(wsum), p, static_cast<const T*>(lse.data_ptr()),
                             ptr_or_null<T>(gin.per_sample), static_cast<T>(gin.value));
      });
      return variable_list{gi};
    });
  }
  return out;
}

// ---------------------------------------------------------------- the op, class probabilities

Tensor cross_entropy_prob(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index, Reduction red,
                          double eps) {
  DP_CHECK(is_floating_point(target.dtype()), DTypeError, kOp, ": Expected floating point type for target with class probabilities, got ",
           kernels::torch_type_name(target.dtype()), " (target ", target.describe(), " has the input's shape)");
  loss::check_companion(kOp, input, target, "target");
  DP_CHECK(ignore_index < 0, ValueError, kOp, ": ignore_index is not supported for floating point target (got ignore_index ", ignore_index, ")");
  DP_CHECK(input.dim() >= 1, ShapeError, kOp, ": Expected 1 or more dimensions (got 0) (input ", input.describe(), ")");
  Params p;
  if (input.dim() == 1) {
    p.geo.c = input.size(0);
    p.geo.class_dim = 0;
  } else {
    p.geo.n = input.size(0);
    p.geo.c = input.size(1);
    p.geo.out_shape.push_back(p.geo.n);
    for (int64_t d = 2; d < input.dim(); ++d) {
      p.geo.out_shape.push_back(input.size(d));
      p.geo.s *= input.size(d);
    }
  }
  p.eps = eps;
  p.ignore = ignore_index;
  loss::check_class_weight(kOp, input, weight, p.geo.c);
#if DP_HAVE_CUDA
  if (input.is_cuda()) return cross_entropy_prob_cuda(input, target, weight.defined() ? kernels::contiguous_nograd(weight) : Tensor(), p, red);
#endif

  const Tensor x = kernels::contiguous_nograd(input);
  const Tensor t = kernels::contiguous_nograd(target);
  const Tensor w = weight.defined() ? kernels::contiguous_nograd(weight) : Tensor();
  const int64_t samples = p.geo.n * p.geo.s;
  Tensor out = red == Reduction::None ? make_empty(p.geo.out_shape, x.dtype(), x.device()) : Tensor();
  Tensor lse = make_empty({samples}, x.dtype(), x.device());
  Tensor rs = make_empty({samples}, x.dtype(), x.device());
  double total = 0;
  dispatch_real(x.dtype(), [&]<typename T>() {
    total = prob_forward<T>(static_cast<const T*>(x.data_ptr()), static_cast<const T*>(t.data_ptr()), ptr_or_null<T>(w), p,
                            out.defined() ? static_cast<T*>(out.data_ptr()) : nullptr, static_cast<T*>(lse.data_ptr()),
                            static_cast<T*>(rs.data_ptr()));
  });
  // PyTorch: the mean over samples, NaN for an empty input.
  const double mean_div = x.numel() == 0 ? 0.0 : static_cast<double>(samples);
  if (red == Reduction::Mean) out = loss::scalar_result(x.numel() == 0 ? std::nan("") : total / mean_div, x.dtype(), x.device());
  else if (red == Reduction::Sum) out = loss::scalar_result(total, x.dtype(), x.device());

  record_prob_backward(input, target, out, w, p, red, samples,
                       [=](const Tensor& gi, const Tensor& gt, const Tensor& g, const Tensor& xc, const Tensor& tc, double scale) {
                         const GradIn gin = grad_in(g, red, scale, xc.dtype());
                         dispatch_real(xc.dtype(), [&]<typename T>() {
                           prob_backward<T>(gi.defined() ? static_cast<T*>(gi.data_ptr()) : nullptr,
                                            gt.defined() ? static_cast<T*>(gt.data_ptr()) : nullptr, static_cast<const T*>(xc.data_ptr()),
                                            static_cast<const T*>(tc.data_ptr()), ptr_or_null<T>(w), p,
                                            static_cast<const T*>(lse.data_ptr()), static_cast<const T*>(rs.data_ptr()),
                                            ptr_or_null<T>(gin.per_sample), static_cast<T>(gin.value));
                         });
                       });
  return out;
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index, Reduction reduction,
                     double label_smoothing) {
  if (autocast::detail::Cast ac{autocast::detail::Op::cross_entropy, {&input, &target, &weight}})
    return ac([&] { return dp::cross_entropy(ac[0], ac[1], ac[2], ignore_index, reduction, label_smoothing); });
  loss::check_input(kOp, input);
  ops::check_defined(kOp, target, "target");
  ops::check_same_device(kOp, {&input, &target});
  DP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError, kOp, ": label_smoothing must be between 0.0 and 1.0. Got: ",
           label_smoothing);
  if (target.sizes() == input.sizes()) return cross_entropy_prob(input, target, weight, ignore_index, reduction, label_smoothing);
  return cross_entropy_index(input, target, weight, ignore_index, reduction, label_smoothing);
}

}  // namespace dp
