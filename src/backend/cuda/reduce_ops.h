#pragma once
// The per-element and per-thread logic of the CUDA reductions and softmax, plain C++ with
// DP_HOST_DEVICE: the kernels (reduce.cu, softmax.cu) run it on the GPU, and the host tests
// (tests/cuda/test_cuda_reduce.cpp, test_cuda_softmax.cpp) run the same code through a host
// emulation of the kernels' thread schedule, so the accumulators, the split of the work and the
// combination order are checked against the CPU kernels on any machine.
//
// A reduction op is an accumulator struct:
//   using acc_t = ...;
//   acc_t identity() const;
//   acc_t step(acc_t a, T v, int64_t r) const;   // r: the reduced index (grows within a thread)
//   acc_t combine(acc_t a, acc_t b) const;       // any grouping and order of threads' results
//   void store(acc_t a, int64_t out_offset) const;
// combine() must not depend on which thread held which elements: sums, extremes and moments do
// not (up to rounding, in the kernels' fixed order); index reductions break ties (and NaN against
// NaN) by the smaller index, so the first index wins as on the CPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include "dp/core/half.h"
#include "dp/core/macros.h"
#include "backend/dispatch.h"
#include "backend/cuda/reduce_config.h"

namespace dp::backend::cuda::detail {

using backend::convert;

// float32, float16 and bfloat16 accumulate in float32; float64 in float64.
template <typename T>
using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
// Values of max / min: 16-bit floats compare as float, everything else as itself.
template <typename T>
using cmp_t = std::conditional_t<backend::is_reduced_float_v<T>, float, T>;

// ---------------------------------------------------------------- math on float / double

DP_HOST_DEVICE DP_INLINE float acc_exp(float x) { return expf(x); }
DP_HOST_DEVICE DP_INLINE double acc_exp(double x) { return ::exp(x); }
DP_HOST_DEVICE DP_INLINE float acc_log(float x) { return logf(x); }
DP_HOST_DEVICE DP_INLINE double acc_log(double x) { return ::log(x); }
DP_HOST_DEVICE DP_INLINE float acc_sqrt(float x) { return sqrtf(x); }
DP_HOST_DEVICE DP_INLINE double acc_sqrt(double x) { return ::sqrt(x); }
DP_HOST_DEVICE DP_INLINE float acc_pow(float x, float p) { return powf(x, p); }
DP_HOST_DEVICE DP_INLINE double acc_pow(double x, double p) { return ::pow(x, p); }
DP_HOST_DEVICE DP_INLINE float acc_abs(float x) { return fabsf(x); }
DP_HOST_DEVICE DP_INLINE double acc_abs(double x) { return ::fabs(x); }

// Infinity and NaN from their bits (std::numeric_limits is host-only in device code).
template <typename A>
DP_HOST_DEVICE DP_INLINE A acc_inf() {
  if constexpr (std::is_same_v<A, float>) {
    return dp::detail::bits_f32(0x7f800000u);
  } else {
    const uint64_t b = 0x7ff0000000000000ull;
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
  }
}
template <typename A>
DP_HOST_DEVICE DP_INLINE A acc_nan() {
  if constexpr (std::is_same_v<A, float>) {
    return dp::detail::bits_f32(0x7fc00000u);
  } else {
    const uint64_t b = 0x7ff8000000000000ull;
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
  }
}

// ---------------------------------------------------------------- the thread schedule

// The reduced elements [begin, end) of grid row `split`.
struct Range {
  int64_t begin, end;
};
DP_HOST_DEVICE DP_INLINE Range split_range(const ReduceParams& p, const ReduceLaunch& l, int64_t split) {
  const int64_t b = split * l.chunk;
  return {b, b + l.chunk < p.red_numel ? b + l.chunk : p.red_numel};
}

// Thread (tx, ty) of output group g: its output o, its first reduced index (within the split)
// and the stride between its reduced indices.
struct ThreadWork {
  int64_t o, r0, step;
};
DP_HOST_DEVICE DP_INLINE ThreadWork thread_work(const ReduceLaunch& l, int64_t g, int tx, int ty, int64_t begin) {
  if (l.rows) return {g * l.block_y + ty, begin + tx, l.block_x};
  return {g * l.block_x + tx, begin + ty, l.block_y};
}

// Folds elements r, r + step, ... below end of one output (its kept-dim offset applied to base)
// into acc. With one reduced dim, four loads are issued before they are folded in (memory-level
// parallelism); several unmerged reduced dims go one at a time (the index math dominates).
template <typename T, typename Op, typename A>
DP_HOST_DEVICE DP_INLINE A reduce_range(const ReduceParams& p, const Op& op, const T* base, int64_t r, int64_t end, int64_t step, A acc) {
  if (p.nr <= 1) {
    const int64_t s = p.nr ? p.rin[0] : 0;
    for (; r + 3 * step < end; r += 4 * step) {
      const T v0 = base[r * s], v1 = base[(r + step) * s], v2 = base[(r + 2 * step) * s], v3 = base[(r + 3 * step) * s];
      acc = op.step(acc, v0, r);
      acc = op.step(acc, v1, r + step);
      acc = op.step(acc, v2, r + 2 * step);
      acc = op.step(acc, v3, r + 3 * step);
    }
    for (; r < end; r += step) acc = op.step(acc, base[r * s], r);
  } else {
    for (; r < end; r += step) acc = op.step(acc, base[p.reduced_offset(r)], r);
  }
  return acc;
}

// ---------------------------------------------------------------- sum / mean

template <typename T, typename A, typename O>
struct SumOp {
  using acc_t = A;
  O* out;
  A divisor;  // 1 for sum, N for mean (floating accumulators only)
  DP_HOST_DEVICE DP_INLINE A identity() const { return A(0); }
  DP_HOST_DEVICE DP_INLINE A step(A a, T v, int64_t) const { return a + convert<A>(v); }
  DP_HOST_DEVICE DP_INLINE A combine(A a, A b) const { return a + b; }
  DP_HOST_DEVICE DP_INLINE void store(A a, int64_t o) const {
    if constexpr (std::is_floating_point_v<A>)
      out[o] = convert<O>(a / divisor);  // 0 / 0 = nan: mean of nothing
    else
      out[o] = convert<O>(a);
  }
};

// ---------------------------------------------------------------- max / min

// The running extreme a replaced by x (NaN sticks once seen).
template <typename V>
DP_HOST_DEVICE DP_INLINE V pick(bool is_max, V a, V x) {
  if constexpr (std::is_floating_point_v<V>) {
    if (x != x) return x;
  }
  return (is_max ? x > a : x < a) ? x : a;
}

// The identity of max (is_max) or min over V (host only: the op carries it to the device).
template <typename V>
V extreme_identity(bool is_max) {
  if constexpr (std::numeric_limits<V>::has_infinity)
    return is_max ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
  else
    return is_max ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
}

template <typename T>
struct ExtremeOp {
  using V = cmp_t<T>;
  using acc_t = V;
  T* out;
  V init;
  bool is_max;
  DP_HOST_DEVICE DP_INLINE V identity() const { return init; }
  DP_HOST_DEVICE DP_INLINE V step(V a, T v, int64_t) const { return pick(is_max, a, convert<V>(v)); }
  DP_HOST_DEVICE DP_INLINE V combine(V a, V b) const { return pick(is_max, a, b); }
  DP_HOST_DEVICE DP_INLINE void store(V a, int64_t o) const { out[o] = convert<T>(a); }
};

template <typename V>
struct ValIdx {
  V v;
  int64_t i;  // -1: nothing seen yet
};

template <typename T>
struct ExtremeIndexOp {
  using V = cmp_t<T>;
  using acc_t = ValIdx<V>;
  T* values;         // may be null
  int64_t* indices;  // may be null
  V init;
  bool is_max;
  // x beats cur: larger (smaller), or NaN against a number.
  DP_HOST_DEVICE DP_INLINE bool better(V x, V cur) const {
    if constexpr (std::is_floating_point_v<V>) {
      if (x != x) return cur == cur;
      if (cur != cur) return false;
    }
    return is_max ? x > cur : x < cur;
  }
  DP_HOST_DEVICE DP_INLINE acc_t identity() const { return {init, -1}; }
  DP_HOST_DEVICE DP_INLINE acc_t step(acc_t a, T v, int64_t r) const {
    const V x = convert<V>(v);
    return (a.i < 0 || better(x, a.v)) ? acc_t{x, r} : a;  // r grows within a thread: ties keep the first
  }
  DP_HOST_DEVICE DP_INLINE acc_t combine(acc_t a, acc_t b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if (better(b.v, a.v)) return b;
    if (better(a.v, b.v)) return a;
    return b.i < a.i ? b : a;  // equal (or both NaN): the first index
  }
  DP_HOST_DEVICE DP_INLINE void store(acc_t a, int64_t o) const {
    if (values) values[o] = convert<T>(a.v);
    if (indices) indices[o] = a.i < 0 ? 0 : a.i;
  }
};

// ---------------------------------------------------------------- var / std

template <typename A>
struct Moments {
  A mean, m2;
  int64_t n;
};

template <typename T>
struct VarOp {
  using A = facc_t<T>;
  using acc_t = Moments<A>;
  T* out;
  A correction;
  bool take_sqrt;
  DP_HOST_DEVICE DP_INLINE acc_t identity() const { return {A(0), A(0), 0}; }
  DP_HOST_DEVICE DP_INLINE acc_t step(acc_t a, T v, int64_t) const {  // Welford
    const A x = convert<A>(v);
    const int64_t n = a.n + 1;
    const A d = x - a.mean;
    const A mean = a.mean + d / static_cast<A>(n);
    return {mean, a.m2 + d * (x - mean), n};
  }
  DP_HOST_DEVICE DP_INLINE acc_t combine(acc_t a, acc_t b) const {  // Chan et al.
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const A d = b.mean - a.mean;
    const A fb = static_cast<A>(b.n) / static_cast<A>(n);
    return {a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<A>(a.n) * fb, n};
  }
  DP_HOST_DEVICE DP_INLINE void store(acc_t a, int64_t o) const {
    const A div = static_cast<A>(a.n) - correction;
    const A v = a.m2 / (div > A(0) ? div : A(0));  // 0/0 = nan (N <= correction with no spread), x/0 = inf
    out[o] = convert<T>(take_sqrt ? acc_sqrt(v) : v);
  }
};

// ---------------------------------------------------------------- logsumexp

// sum_i exp(x_i - m) = s with m the running max. m = -inf: empty (or all -inf); m = +inf: the
// result is +inf; m = nan: the result is nan.
template <typename A>
struct Lse {
  A m, s;
};

template <typename A>
DP_HOST_DEVICE DP_INLINE Lse<A> lse_combine(Lse<A> a, Lse<A> b) {
  const A inf = acc_inf<A>();
  if (a.m != a.m || b.m != b.m) return {acc_nan<A>(), A(0)};
  if (a.m == -inf) return b;
  if (b.m == -inf) return a;
  if (a.m == inf || b.m == inf) return {inf, A(1)};
  if (a.m >= b.m) return {a.m, a.s + b.s * acc_exp(b.m - a.m)};
  return {b.m, b.s + a.s * acc_exp(a.m - b.m)};
}

template <typename T>
struct LseOp {
  using A = facc_t<T>;
  using acc_t = Lse<A>;
  T* out;
  DP_HOST_DEVICE DP_INLINE acc_t identity() const { return {-acc_inf<A>(), A(0)}; }
  DP_HOST_DEVICE DP_INLINE acc_t step(acc_t a, T v, int64_t) const {
    const A x = convert<A>(v);
    return lse_combine(a, acc_t{x, x == -acc_inf<A>() ? A(0) : A(1)});
  }
  DP_HOST_DEVICE DP_INLINE acc_t combine(acc_t a, acc_t b) const { return lse_combine(a, b); }
  DP_HOST_DEVICE DP_INLINE void store(acc_t a, int64_t o) const {
    const bool special = a.m != a.m || a.m == acc_inf<A>() || a.m == -acc_inf<A>();  // nan, +inf, -inf (empty) as they are
    out[o] = convert<T>(special ? a.m : a.m + acc_log(a.s));
  }
};

// ---------------------------------------------------------------- norms

enum class NormKind { Zero, One, Two, Inf, NegInf, General };

inline NormKind norm_kind(double p) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  return p == 0.0     ? NormKind::Zero
         : p == 1.0   ? NormKind::One
         : p == 2.0   ? NormKind::Two
         : p == kInf  ? NormKind::Inf
         : p == -kInf ? NormKind::NegInf
                      : NormKind::General;
}

template <typename T>
struct NormOp {
  using A = facc_t<T>;
  using acc_t = A;
  T* out;
  NormKind kind;
  A p;
  DP_HOST_DEVICE DP_INLINE A identity() const { return kind == NormKind::NegInf ? acc_inf<A>() : A(0); }
  DP_HOST_DEVICE DP_INLINE A step(A a, T v, int64_t) const {
    const A x = acc_abs(convert<A>(v));
    switch (kind) {
      case NormKind::Zero:
        return a + (x != A(0) ? A(1) : A(0));
      case NormKind::One:
        return a + x;
      case NormKind::Two:
        return a + x * x;
      case NormKind::Inf:
        return (x > a || x != x) ? x : a;
      case NormKind::NegInf:
        return (x < a || x != x) ? x : a;
      case NormKind::General:
        return a + acc_pow(x, p);
    }
    return a;
  }
  DP_HOST_DEVICE DP_INLINE A combine(A a, A b) const {
    if (kind == NormKind::Inf) return (b > a || b != b) ? b : a;
    if (kind == NormKind::NegInf) return (b < a || b != b) ? b : a;
    return a + b;
  }
  DP_HOST_DEVICE DP_INLINE void store(A a, int64_t o) const {
    A r = a;
    if (kind == NormKind::Two)
      r = acc_sqrt(a);
    else if (kind == NormKind::General)
      r = acc_pow(a, A(1) / p);
    out[o] = convert<T>(r);
  }
};

// ---------------------------------------------------------------- softmax

// The running max m of a row and s = sum exp(x - m) over its elements so far (online softmax).
template <typename A>
struct MaxSum {
  A m, s;
};

template <typename A>
DP_HOST_DEVICE DP_INLINE MaxSum<A> max_sum_identity() {
  return {-acc_inf<A>(), A(0)};
}

// Folds x into the running (m, s). Special values end as the CPU's: a NaN or a +inf makes s NaN
// (inf - inf), -inf elements add nothing.
template <typename A>
DP_HOST_DEVICE DP_INLINE MaxSum<A> online_step(MaxSum<A> a, A x) {
  if (x > a.m) return {x, a.s * acc_exp(a.m - x) + acc_exp(x - x)};  // exp(x - x): nan for x = +inf
  if (x == -acc_inf<A>()) return a;                                  // adds 0 (and no -inf - -inf)
  return {a.m, a.s + acc_exp(x - a.m)};                              // NaN x: s becomes NaN
}

template <typename A>
DP_HOST_DEVICE DP_INLINE MaxSum<A> online_combine(MaxSum<A> a, MaxSum<A> b) {
  const A m = a.m > b.m ? a.m : b.m;
  if (m == -acc_inf<A>()) return {m, a.s + b.s};  // nothing but -inf (and NaN, which s carries)
  const A fa = a.m == m ? A(1) : acc_exp(a.m - m);
  const A fb = b.m == m ? A(1) : acc_exp(b.m - m);
  return {m, a.s * fa + b.s * fb};
}

// The result for element x of a row with (m, s): a row of -inf gives nan (0 / 0), as the CPU.
template <bool Log, typename A>
DP_HOST_DEVICE DP_INLINE A softmax_value(A x, MaxSum<A> ms) {
  if constexpr (Log)
    return (x - ms.m) - acc_log(ms.s);  // (x - max) - log(sum): no rounding at max's magnitude
  else
    return acc_exp(x - ms.m) / ms.s;
}

// Backward, per element given the row's sum t of backward_term:
//   softmax:     t = sum(g * y), gi = y * (g - t)
//   log_softmax: t = sum(g),     gi = g - exp(y) * t
template <bool Log, typename A>
DP_HOST_DEVICE DP_INLINE A backward_term(A g, A y) {
  if constexpr (Log)
    return g;
  else
    return g * y;
}
template <bool Log, typename A>
DP_HOST_DEVICE DP_INLINE A backward_value(A g, A y, A t) {
  if constexpr (Log)
    return g - acc_exp(y) * t;
  else
    return y * (g - t);
}

}  // namespace dp::backend::cuda::detail
