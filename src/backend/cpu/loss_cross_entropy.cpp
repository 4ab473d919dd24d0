// The CPU kernels of cross_entropy (the kernel interface: backend/loss_kernels.h; the formulas and
// the op: src/ops/loss_cross_entropy.cpp). Float32 and float64.
// Layout: input seen as [N, C, S]. S == 1 (the usual [N, C]): per row, a max pass, an exp pass
// (vectorised, into an L1 scratch row) and, with smoothing, a weighted sum pass; S > 1: the same
// passes run down C over blocks of contiguous positions, vectorised across positions. Sums over
// samples are kept in double; the saved log-sum-exps and sums have the input's dtype.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include "backend/cpu/loss_common.h"
#include "backend/cpu/reduce_vec.h"

namespace dp::backend::cpu {
namespace {

using cpu::loss::incoming;
using cpu::loss::Incoming;
using cpu::loss::mut_or_null;
using cpu::loss::ptr_or_null;
using backend::cpu::exp_diff;
using backend::cpu::row_max;

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
  return backend::cpu::combine16(s) + r;
}

struct Params {
  ClassShape geo;
  double eps = 0;  // label smoothing
  int64_t ignore = -100;
};

// ---------------------------------------------------------------- class-index targets

// Returns false at the first target outside [0, C) that is not ignored (the op then throws).
template <typename T, typename I>
bool index_forward(const T* x, const I* tg, const T* w, T wsum, const Params& p, T* out, T* lse, double& total, double& tw) {
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
      if (t < 0 || t >= C) [[unlikely]]
        return false;
      const T* xr = x + i * C;
      const T m = row_max(xr, C);
      const T ls = std::log(exp_diff<T, true>(xr, nullptr, m, scratch.data(), C));
      const T wt = w ? w[t] : T(1);
      T v = keep * wt * ((m - xr[t]) + ls);
      if (eps > T(0)) {
        const T sd = w ? lane_sum<T>(C, [&](int64_t c) { return w[c] * (m - xr[c]); }) : lane_sum<T>(C, [&](int64_t c) { return m - xr[c]; });
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
          if (t < 0 || t >= C) [[unlikely]]
            return false;
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
  total = sum;
  tw = wtot;
  return true;
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

// ---------------------------------------------------------------- tensors to pointers

// sum_c w[c] (C without weights), summed in double, for label smoothing (0 without it: unused).
template <typename T>
T weight_sum(const T* w, int64_t C, double eps) {
  if (eps <= 0) return T(0);
  if (w == nullptr) return static_cast<T>(C);
  double s = 0;
  for (int64_t c = 0; c < C; ++c) s += static_cast<double>(w[c]);
  return static_cast<T>(s);
}

Params params(ClassShape cs, int64_t ignore, double eps) {
  Params p;
  p.geo = cs;
  p.ignore = ignore;
  p.eps = eps;
  return p;
}

bool cross_entropy_index_forward_kernel(const Tensor& out, Reduction red, const Tensor& total_weight, const Tensor& lse, const Tensor& x,
                                        const Tensor& target, const Tensor& w, ClassShape cs, int64_t ignore, double eps) {
  const Params p = params(cs, ignore, eps);
  bool ok = true;
  cpu::loss::dispatch_index(x.dtype(), target.dtype(), kOp, [&]<typename T, typename I>() {
    double total = 0, tw = 0;
    ok = index_forward<T, I>(static_cast<const T*>(x.data_ptr()), static_cast<const I*>(target.data_ptr()), ptr_or_null<T>(w),
                             weight_sum(ptr_or_null<T>(w), cs.c, eps), p, red == Reduction::None ? static_cast<T*>(out.data_ptr()) : nullptr,
                             static_cast<T*>(lse.data_ptr()), total, tw);
    if (!ok || red == Reduction::None) return;
    static_cast<T*>(out.data_ptr())[0] = static_cast<T>(red == Reduction::Mean ? total / tw : total);
    static_cast<T*>(total_weight.data_ptr())[0] = static_cast<T>(tw);
  });
  return !ok;
}

void cross_entropy_index_backward_kernel(const Tensor& gi, const LossGrad& g, const Tensor& x, const Tensor& target, const Tensor& w,
                                         const Tensor& lse, ClassShape cs, int64_t ignore, double eps) {
  const Params p = params(cs, ignore, eps);
  cpu::loss::dispatch_index(x.dtype(), target.dtype(), kOp, [&]<typename T, typename I>() {
    const Incoming<T> in = incoming<T>(g);
    index_backward<T, I>(static_cast<T*>(gi.data_ptr()), static_cast<const T*>(x.data_ptr()), static_cast<const I*>(target.data_ptr()),
                         ptr_or_null<T>(w), weight_sum(ptr_or_null<T>(w), cs.c, eps), p, static_cast<const T*>(lse.data_ptr()), in.per_sample,
                         in.value);
  });
}

void cross_entropy_prob_forward_kernel(const Tensor& out, bool reduced, double scale, const Tensor& lse, const Tensor& rs, const Tensor& x,
                                       const Tensor& tq, const Tensor& w, ClassShape cs, double eps) {
  const Params p = params(cs, -100, eps);
  cpu::loss::dispatch_real(x.dtype(), kOp, [&]<typename T>() {
    const double total =
        prob_forward<T>(static_cast<const T*>(x.data_ptr()), static_cast<const T*>(tq.data_ptr()), ptr_or_null<T>(w), p,
                        reduced ? nullptr : static_cast<T*>(out.data_ptr()), static_cast<T*>(lse.data_ptr()), static_cast<T*>(rs.data_ptr()));
    if (reduced) static_cast<T*>(out.data_ptr())[0] = static_cast<T>(total * scale);
  });
}

void cross_entropy_prob_backward_kernel(const Tensor& gi, const Tensor& gt, const LossGrad& g, const Tensor& x, const Tensor& tq, const Tensor& w,
                                        const Tensor& lse, const Tensor& rs, ClassShape cs, double eps) {
  const Params p = params(cs, -100, eps);
  cpu::loss::dispatch_real(x.dtype(), kOp, [&]<typename T>() {
    const Incoming<T> in = incoming<T>(g);
    prob_backward<T>(mut_or_null<T>(gi), mut_or_null<T>(gt), static_cast<const T*>(x.data_ptr()), static_cast<const T*>(tq.data_ptr()),
                     ptr_or_null<T>(w), p, static_cast<const T*>(lse.data_ptr()), static_cast<const T*>(rs.data_ptr()), in.per_sample, in.value);
  });
}

}  // namespace

void register_cross_entropy_kernels() {
  DP_REGISTER_KERNEL(CPU, cross_entropy_index_forward_kernel);
  DP_REGISTER_KERNEL(CPU, cross_entropy_index_backward_kernel);
  DP_REGISTER_KERNEL(CPU, cross_entropy_prob_forward_kernel);
  DP_REGISTER_KERNEL(CPU, cross_entropy_prob_backward_kernel);
}

}  // namespace dp::backend::cpu
