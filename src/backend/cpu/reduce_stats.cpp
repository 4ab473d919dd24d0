// var / std (Welford, two-pass on contiguous rows), logsumexp (running max, stable) and p-norms.
// Everything accumulates in double.
#include <vector>
#include "backend/cpu/blas.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/reduce_vec.h"

namespace dp::backend::cpu {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
inline double sum_row_d(const T* p, int64_t n) {
  double s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += convert<double>(p[i + k]);
  double t = 0;
  for (; i < n; ++i) t += convert<double>(p[i]);
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + t;
}

// ---- var / std ----

struct Moments {
  double mean, m2;
  int64_t n;
};

template <typename T>
struct VarOp : ReduceOpBase<VarOp<T>, T, Moments> {
  T* out;
  double correction;
  bool take_sqrt;
  Moments identity() const { return {0.0, 0.0, 0}; }
  Moments step(Moments a, T v, int64_t) const {
    const double x = convert<double>(v);
    const int64_t n = a.n + 1;
    const double d = x - a.mean;
    const double mean = a.mean + d / static_cast<double>(n);
    return {mean, a.m2 + d * (x - mean), n};
  }
  Moments combine(Moments a, Moments b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const double d = b.mean - a.mean;
    const double fb = static_cast<double>(b.n) / static_cast<double>(n);
    return {a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<double>(a.n) * fb, n};
  }
  Moments row(const T* p, int64_t n, int64_t) const {
    if (n == 0) return identity();
    const double mean = sum_row_d(p, n) / static_cast<double>(n);
    double s[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) {
        const double d = convert<double>(p[i + k]) - mean;
        s[k] += d * d;
      }
    double t = 0;
    for (; i < n; ++i) {
      const double d = convert<double>(p[i]) - mean;
      t += d * d;
    }
    const double m2 = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + t;
    return {mean, m2, n};
  }
  // Every accumulator has seen the same number of rows: one reciprocal per row, no divisions.
  void accumulate(Moments* a, const T* q, int64_t rs, int64_t rows, int64_t n, int64_t) const {
    for (int64_t r = 0; r < rows; ++r) {
      const T* qr = q + r * rs;
      const int64_t cnt = a[0].n + 1;
      const double inv = 1.0 / static_cast<double>(cnt);
      for (int64_t j = 0; j < n; ++j) {
        const double x = convert<double>(qr[j]);
        const double d = x - a[j].mean;
        const double mean = a[j].mean + d * inv;
        a[j].m2 += d * (x - mean);
        a[j].mean = mean;
        a[j].n = cnt;
      }
    }
  }
  void store(Moments a, int64_t o) const {
    const double div = std::max(0.0, static_cast<double>(a.n) - correction);
    const double v = a.m2 / div;  // 0/0 = nan (N <= correction with no spread), x/0 = inf
    out[o] = convert<T>(take_sqrt ? std::sqrt(v) : v);
  }
};

// ---- logsumexp ----

// sum_i exp(x_i - m) = s, with m the running max. m = -inf: empty (or all -inf); m = +inf: the
// result is +inf; m = nan: the result is nan.
struct Lse {
  double m, s;
};

inline Lse lse_combine(Lse a, Lse b) {
  if (a.m != a.m || b.m != b.m) return {kNaN, 0.0};
  if (a.m == -kInf) return b;
  if (b.m == -kInf) return a;
  if (a.m == kInf || b.m == kInf) return {kInf, 1.0};
  if (a.m >= b.m) return {a.m, a.s + b.s * std::exp(b.m - a.m)};
  return {b.m, b.s + a.s * std::exp(a.m - b.m)};
}

template <typename T>
struct LseOp : ReduceOpBase<LseOp<T>, T, Lse> {
  T* out;
  Lse identity() const { return {-kInf, 0.0}; }
  Lse step(Lse a, T v, int64_t) const {
    const double x = convert<double>(v);
    return lse_combine(a, Lse{x, x == -kInf ? 0.0 : 1.0});
  }
  Lse combine(Lse a, Lse b) const { return lse_combine(a, b); }
  Lse row(const T* p, int64_t n, int64_t) const {
    if constexpr (std::is_same_v<T, float>) {
      // Vectorised: the max, then exp(x - max) in float (as PyTorch) summed in double.
      const float m = row_max(p, n);  // may skip NaN: they reach the sum below
      if (m == -std::numeric_limits<float>::infinity()) return {-kInf, 0.0};
      if (m == std::numeric_limits<float>::infinity()) {
        for (int64_t i = 0; i < n; ++i)
          if (p[i] != p[i]) return {kNaN, 0.0};
        return {kInf, 1.0};
      }
      constexpr int64_t kChunk = 256;
      float buf[kChunk];
      double s = 0;
      for (int64_t i = 0; i < n; i += kChunk) s += exp_diff<float, true>(p + i, nullptr, m, buf, std::min(kChunk, n - i));
      if (s != s) return {kNaN, 0.0};
      return {static_cast<double>(m), s};
    } else {
      double m = -kInf;
      for (int64_t i = 0; i < n; ++i) {
        const double x = convert<double>(p[i]);
        m = (x > m || x != x) ? x : m;
      }
      if (m != m) return {kNaN, 0.0};
      if (m == -kInf) return {-kInf, 0.0};
      if (m == kInf) return {kInf, 1.0};
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += std::exp(convert<double>(p[i]) - m);
      return {m, s};
    }
  }
  void store(Lse a, int64_t o) const {
    double r;
    if (a.m != a.m)
      r = kNaN;
    else if (a.m == kInf || a.m == -kInf)
      r = a.m;
    else
      r = a.m + std::log(a.s);
    out[o] = convert<T>(r);
  }
};

// ---- norms ----

enum class NormKind { Zero, One, Two, Inf, NegInf, General };

template <typename T>
struct NormOp : ReduceOpBase<NormOp<T>, T, double> {
  T* out;
  NormKind kind;
  double p;
  double identity() const { return kind == NormKind::NegInf ? kInf : 0.0; }
  double step(double a, T v, int64_t) const {
    const double x = std::fabs(convert<double>(v));
    switch (kind) {
      case NormKind::Zero:
        return a + (x != 0.0 ? 1.0 : 0.0);
      case NormKind::One:
        return a + x;
      case NormKind::Two:
        return a + x * x;
      case NormKind::Inf:
        return (x > a || x != x) ? x : a;
      case NormKind::NegInf:
        return (x < a || x != x) ? x : a;
      case NormKind::General:
        return a + std::pow(x, p);
    }
    return a;
  }
  double combine(double a, double b) const {
    if (kind == NormKind::Inf) return (b > a || b != b) ? b : a;
    if (kind == NormKind::NegInf) return (b < a || b != b) ? b : a;
    return a + b;
  }
  double row(const T* q, int64_t n, int64_t) const {
    if (kind == NormKind::Two) {
      double s[8] = {};
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) {
          const double x = convert<double>(q[i + k]);
          s[k] += x * x;
        }
      double t = 0;
      for (; i < n; ++i) {
        const double x = convert<double>(q[i]);
        t += x * x;
      }
      return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + t;
    }
    double a = identity();
    for (int64_t i = 0; i < n; ++i) a = step(a, q[i], 0);
    return a;
  }
  void store(double a, int64_t o) const {
    double r = a;
    if (kind == NormKind::Two)
      r = std::sqrt(a);
    else if (kind == NormKind::General)
      r = std::pow(a, 1.0 / p);
    out[o] = convert<T>(r);
  }
};

}  // namespace

void var_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, int64_t correction, bool take_sqrt) {
  ReducePlan plan = make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  dispatch_floating(in.dtype(), take_sqrt ? "std" : "var", [&]<typename T>() {
    VarOp<T> op;
    op.out = out.data_ptr<T>();
    op.correction = static_cast<double>(correction);
    op.take_sqrt = take_sqrt;
    run_reduce<T>(plan, in.numel() ? static_cast<const T*>(in.data_ptr()) : nullptr, op);
  });
}

void logsumexp_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  ReducePlan plan = make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  dispatch_floating(in.dtype(), "logsumexp", [&]<typename T>() {
    LseOp<T> op;
    op.out = out.data_ptr<T>();
    run_reduce<T>(plan, in.numel() ? static_cast<const T*>(in.data_ptr()) : nullptr, op);
  });
}

void norm_kernel(const Tensor& out, const Tensor& in, double p) {
  std::vector<bool> reduced(static_cast<size_t>(in.dim()), true);
  ReducePlan plan = make_reduce_plan(out, in, reduced, /*keepdim=*/false, /*reorder=*/true);
  NormKind kind = p == 0.0     ? NormKind::Zero
                  : p == 1.0   ? NormKind::One
                  : p == 2.0   ? NormKind::Two
                  : p == kInf  ? NormKind::Inf
                  : p == -kInf ? NormKind::NegInf
                               : NormKind::General;
  dispatch_floating(in.dtype(), "norm", [&]<typename T>() {
    NormOp<T> op;
    op.out = out.data_ptr<T>();
    op.kind = kind;
    op.p = p;
    const int64_t n = in.numel();
    if (out.numel() == 1 && in.is_contiguous() && n >= blas::kRangeMin) {
      // The norm of a whole large tensor (clip_grad_norm_'s per-gradient norms): memory-bound, so
      // fixed pieces of blas::kRangePiece elements (the same whatever the thread count, so the
      // result is too) reduced by the host's threads, combined in order.
      const int64_t pieces = (n + blas::kRangePiece - 1) / blas::kRangePiece;
      std::vector<double> part(static_cast<size_t>(pieces));
      const T* q = static_cast<const T*>(in.data_ptr());
      blas::parallel_for(pieces, blas::parallel_slots(), [&](int64_t i, int) {
        const int64_t b = i * blas::kRangePiece;
        part[static_cast<size_t>(i)] = op.row(q + b, std::min(n, b + blas::kRangePiece) - b, b);
      });
      double acc = op.identity();
      for (double v : part) acc = op.combine(acc, v);
      op.store(acc, 0);
      return;
    }
    run_reduce<T>(plan, n ? static_cast<const T*>(in.data_ptr()) : nullptr, op);
  });
}

}  // namespace dp::backend::cpu
