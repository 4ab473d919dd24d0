// max / min kernels: values over any set of dims, and values with indices along one dim.
// NaN propagates (it is treated as larger than everything for max and smaller for min), as in
// PyTorch; among equal extremes the first index wins.
#include "backend/cpu/reduce.h"

namespace dp::backend::cpu {
namespace {

template <typename V, bool IsMax>
constexpr V extreme_identity() {
  if constexpr (std::numeric_limits<V>::has_infinity)
    return IsMax ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
  else
    return IsMax ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
}

// x replaces the running extreme a (NaN sticks once seen).
template <bool IsMax, typename V>
inline V pick(V a, V x) {
  if constexpr (std::is_floating_point_v<V>) {
    if constexpr (IsMax)
      return (x > a || x != x) ? x : a;
    else
      return (x < a || x != x) ? x : a;
  } else {
    if constexpr (IsMax)
      return x > a ? x : a;
    else
      return x < a ? x : a;
  }
}

// 64 running extremes, updated by a plain inner loop the compiler vectorises (a NaN-aware compare
// does not vectorise as unrolled scalar partials).
template <bool IsMax, typename T>
inline compute_t<T> extreme_row(const T* p, int64_t n) {
  using V = compute_t<T>;
  constexpr int kLanes = 64;
  if (n < 2 * kLanes) {
    V r = extreme_identity<V, IsMax>();
    for (int64_t i = 0; i < n; ++i) r = pick<IsMax>(r, convert<V>(p[i]));
    return r;
  }
  V s[kLanes];
  for (int k = 0; k < kLanes; ++k) s[k] = extreme_identity<V, IsMax>();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) s[k] = pick<IsMax>(s[k], convert<V>(p[i + k]));
  V r = extreme_identity<V, IsMax>();
  for (; i < n; ++i) r = pick<IsMax>(r, convert<V>(p[i]));
  for (int k = 0; k < kLanes; ++k) r = pick<IsMax>(r, s[k]);
  return r;
}

template <typename T, bool IsMax>
struct ExtremeOp : ReduceOpBase<ExtremeOp<T, IsMax>, T, compute_t<T>> {
  using V = compute_t<T>;
  T* out;
  V identity() const { return extreme_identity<V, IsMax>(); }
  V step(V a, T v, int64_t) const { return pick<IsMax>(a, convert<V>(v)); }
  V combine(V a, V b) const { return pick<IsMax>(a, b); }
  V row(const T* p, int64_t n, int64_t) const { return extreme_row<IsMax>(p, n); }
  void store(V a, int64_t o) const { out[o] = convert<T>(a); }
};

template <typename V>
struct ValIdx {
  V v;
  int64_t i;  // -1: nothing seen yet
};

template <typename T, bool IsMax>
struct ExtremeIndexOp : ReduceOpBase<ExtremeIndexOp<T, IsMax>, T, ValIdx<compute_t<T>>> {
  using V = compute_t<T>;
  using acc_type = ValIdx<V>;
  T* values;         // may be null
  int64_t* indices;  // may be null
  static bool better(V x, V cur) {
    if constexpr (std::is_floating_point_v<V>) {
      if (x != x) return cur == cur;
      return IsMax ? x > cur : x < cur;
    } else {
      return IsMax ? x > cur : x < cur;
    }
  }
  acc_type identity() const { return {extreme_identity<V, IsMax>(), -1}; }
  acc_type step(acc_type a, T v, int64_t ridx) const {
    V x = convert<V>(v);
    return (a.i < 0 || better(x, a.v)) ? acc_type{x, ridx} : a;
  }
  acc_type combine(acc_type a, acc_type b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    return better(b.v, a.v) ? b : a;
  }
  // Two vectorised passes: the extreme value, then the first position holding it.
  acc_type row(const T* p, int64_t n, int64_t ridx0) const {
    if (n == 0) return identity();
    V m = extreme_row<IsMax>(p, n);
    int64_t i = 0;
    if (is_nan_value(m)) {
      while (!is_nan_value(convert<V>(p[i]))) ++i;
    } else {
      while (convert<V>(p[i]) != m) ++i;
    }
    return {m, ridx0 + i};
  }
  void store(acc_type a, int64_t o) const {
    if (values) values[o] = convert<T>(a.v);
    if (indices) indices[o] = a.i < 0 ? 0 : a.i;
  }
};

}  // namespace

void minmax_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, bool is_max) {
  ReducePlan plan = make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  dispatch_all(in.dtype(), is_max ? "max" : "min", [&]<typename T>() {
    const T* src = in.numel() ? static_cast<const T*>(in.data_ptr()) : nullptr;
    if (is_max) {
      ExtremeOp<T, true> op;
      op.out = out.data_ptr<T>();
      run_reduce<T>(plan, src, op);
    } else {
      ExtremeOp<T, false> op;
      op.out = out.data_ptr<T>();
      run_reduce<T>(plan, src, op);
    }
  });
}

void minmax_index_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim, bool keepdim, bool is_max) {
  std::vector<bool> reduced(static_cast<size_t>(in.dim()), false);
  if (in.dim() > 0) reduced[dim] = true;
  const Tensor& shape_ref = values.defined() ? values : indices;
  ReducePlan plan = make_reduce_plan(shape_ref, in, reduced, keepdim, /*reorder=*/true);
  if (values.defined() && indices.defined())
    DP_CHECK(values.strides() == indices.strides(), ValueError, "max: values and indices must share a layout");
  const char* name = indices.defined() && !values.defined() ? (is_max ? "argmax" : "argmin") : (is_max ? "max" : "min");
  dispatch_all(in.dtype(), name, [&]<typename T>() {
    const T* src = in.numel() ? static_cast<const T*>(in.data_ptr()) : nullptr;
    T* vp = values.defined() ? values.data_ptr<T>() : nullptr;
    int64_t* ip = indices.defined() ? indices.data_ptr<int64_t>() : nullptr;
    if (is_max) {
      ExtremeIndexOp<T, true> op;
      op.values = vp;
      op.indices = ip;
      run_reduce<T>(plan, src, op);
    } else {
      ExtremeIndexOp<T, false> op;
      op.values = vp;
      op.indices = ip;
      run_reduce<T>(plan, src, op);
    }
  });
}

}  // namespace dp::backend::cpu
