// CUDA reductions: sum, mean, max / min values, max / min with indices (argmax / argmin), var / std,
// logsumexp and p-norms. Every op is an accumulator struct (identity, step, combine, store) run by
// one kernel template, reduce_kernel, in the shape the host picked (cuda/reduce_config.h):
//  - rows:    a warp or a block per output walks its reduced elements (contiguous when the reduced
//             dim is the inner one), then a shuffle / shared-memory reduction;
//  - columns: each thread owns an output (consecutive threads, consecutive outputs) and walks its
//             rows; the block's rows of threads split the rows and combine through shared memory.
// When the outputs are too few to fill the GPU, the reduced space is split across blocks (grid y)
// and a second kernel combines the partial accumulators of each output, in split order.
//
// combine() must not depend on which thread held which elements: sums, extremes and moments do
// not (up to rounding, in a fixed order); index reductions break ties (and NaN against NaN) by the
// smaller index, so the first index wins as on the CPU.
#include <cuda_runtime.h>
#include <algorithm>
#include <atomic>
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#include "core/kernels/reduce.h"
#include "cuda/reduce.cuh"
#include "cuda/reduce.h"
#include "cuda/reduce_config.h"

namespace dp::cuda {

namespace detail {

int multiprocessor_count(int device) {
  // Read once per device; atomics because several worker threads launch at once.
  static std::atomic<int> sms[64] = {};
  int s = sms[device & 63].load(std::memory_order_relaxed);
  if (s == 0) {
    int v = 0;
    DP_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, physical_device(device)));
    s = v > 0 ? v : 1;
    sms[device & 63].store(s, std::memory_order_relaxed);
  }
  return s;
}

}  // namespace detail

namespace {

using detail::ReduceLaunch;
using detail::ReduceParams;
using kernels::compute_t;
using kernels::convert;

// float32, float16 and bfloat16 accumulate in float32; float64 in float64.
template <typename T> using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// ---------------------------------------------------------------- the two kernels

// The reduction of elements [r, end) step `step` of one output whose kept-dim offset is applied
// to `base`. Four loads are issued before they are folded in (memory-level parallelism).
template <typename T, typename Op, typename A>
__device__ DP_INLINE A reduce_range(const ReduceParams& p, const Op& op, const T* base, int64_t r, int64_t end, int64_t step, A acc) {
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
    // Several reduced dims that do not merge: the index math dominates; no unrolling.
    for (; r < end; r += step) acc = op.step(acc, base[p.reduced_offset(r)], r);
  }
  return acc;
}

template <typename T, typename Op>
__global__ void __launch_bounds__(detail::kReduceThreads)
    reduce_kernel(const ReduceParams p, const ReduceLaunch l, const Op op, const T* __restrict__ in, typename Op::acc_t* __restrict__ partial) {
  using A = typename Op::acc_t;
  __shared__ alignas(16) unsigned char smem_raw[detail::kReduceThreads * sizeof(A)];
  A* smem = reinterpret_cast<A*>(smem_raw);
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t split = blockIdx.y;
  const int64_t r_begin = split * l.chunk;
  const int64_t r_end = r_begin + l.chunk < p.red_numel ? r_begin + l.chunk : p.red_numel;
  auto combine = [&op](const A& a, const A& b) { return op.combine(a, b); };
  for (int64_t g = blockIdx.x; g < l.groups; g += gridDim.x) {
    const int64_t o = l.rows ? g * l.block_y + ty : g * l.block_x + tx;
    const bool live = o < p.out_numel;
    int64_t in_off = 0, out_off = 0;
    if (live) p.kept_offsets(o, in_off, out_off);
    A acc = op.identity();
    if (live) acc = reduce_range(p, op, in + in_off, r_begin + (l.rows ? tx : ty), r_end, l.rows ? l.block_x : l.block_y, acc);
    bool owner;  // the thread that holds o's total
    if (l.rows) {
      acc = detail::group_allreduce(acc, l.block_x, smem, combine);
      owner = tx == 0;
    } else {
      if (l.block_y > 1) {
        smem[ty * l.block_x + tx] = acc;
        __syncthreads();
        if (ty == 0)
          for (int k = 1; k < l.block_y; ++k) acc = op.combine(acc, smem[k * l.block_x + tx]);
        __syncthreads();
      }
      owner = ty == 0;
    }
    if (owner && live) {
      if (l.splits == 1) op.store(acc, out_off);
      else partial[o * l.splits + split] = acc;
    }
  }
}

// The second pass when the reduced space was split: a warp per output (blockDim (32, 8)) combines
// its `splits` partial accumulators.
template <typename Op>
__global__ void __launch_bounds__(256)
    combine_kernel(const ReduceParams p, int64_t groups, int64_t splits, const Op op, const typename Op::acc_t* __restrict__ partial) {
  using A = typename Op::acc_t;
  auto combine = [&op](const A& a, const A& b) { return op.combine(a, b); };
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t o = g * 8 + threadIdx.y;
    if (o >= p.out_numel) continue;  // the whole warp
    A acc = op.identity();
    for (int64_t s = threadIdx.x; s < splits; s += 32) acc = op.combine(acc, partial[o * splits + s]);
    acc = detail::warp_reduce(acc, combine);
    if (threadIdx.x == 0) {
      int64_t in_off = 0, out_off = 0;
      p.kept_offsets(o, in_off, out_off);
      op.store(acc, out_off);
    }
  }
}

template <typename T, typename Op>
void launch_reduce(const char* name, const kernels::ReducePlan& plan, const Tensor& in, const Tensor& out, const Op& op) {
  if (plan.out_numel == 0) return;
  using A = typename Op::acc_t;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  const ReduceParams p = detail::make_reduce_params(plan, name);
  const ReduceLaunch l = detail::choose_reduce_launch(plan, detail::multiprocessor_count(dev));
  cudaStream_t stream = current_stream(dev).handle();
  // Partial accumulators, [output][split]. Freed when this returns: the caching allocator hands
  // the block out again only to work ordered after these kernels on this stream.
  Tensor scratch;
  A* partial = nullptr;
  if (l.splits > 1) {
    scratch = make_empty({plan.out_numel * l.splits * static_cast<int64_t>(sizeof(A))}, kUInt8, out.device());
    partial = static_cast<A*>(scratch.data_ptr());
  }
  const T* src = in.numel() ? static_cast<const T*>(in.data_ptr()) : nullptr;
  const dim3 grid(static_cast<unsigned>(l.grid_x), static_cast<unsigned>(l.splits));
  reduce_kernel<T, Op><<<grid, dim3(l.block_x, l.block_y), 0, stream>>>(p, l, op, src, partial);
  DP_CUDA_CHECK(cudaGetLastError());
  if (l.splits > 1) {
    const int64_t groups = detail::ceil_div(plan.out_numel, 8);
    const unsigned blocks = static_cast<unsigned>(std::min(groups, detail::kMaxGridX));
    combine_kernel<Op><<<blocks, dim3(32, 8), 0, stream>>>(p, groups, l.splits, op, partial);
    DP_CUDA_CHECK(cudaGetLastError());
  }
}

void check_devices(const char* name, const Tensor& out, const Tensor& in) {
  DP_CHECK(in.device() == out.device(), DeviceError, name, ": expected all tensors to be on the same device, but found at least two devices, ",
           out.device().str(), " and ", in.device().str(), "!");
}

// ---------------------------------------------------------------- sum / mean

template <typename T, typename A, typename O>
struct SumOp {
  using acc_t = A;
  O* out;
  A divisor;  // 1 for sum, N for mean (floating accumulators only)
  __device__ DP_INLINE A identity() const { return A(0); }
  __device__ DP_INLINE A step(A a, T v, int64_t) const { return a + convert<A>(v); }
  __device__ DP_INLINE A combine(A a, A b) const { return a + b; }
  __device__ DP_INLINE void store(A a, int64_t o) const {
    if constexpr (std::is_floating_point_v<A>) out[o] = convert<O>(a / divisor);  // 0 / 0 = nan: mean of nothing
    else out[o] = convert<O>(a);
  }
};

template <typename T>
void run_sum(const char* name, const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, double divisor) {
  const kernels::ReducePlan plan = kernels::make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  if constexpr (kernels::is_float_v<T>) {
    using A = facc_t<T>;
    launch_reduce<T>(name, plan, in, out, SumOp<T, A, T>{out.data_ptr<T>(), static_cast<A>(divisor)});
  } else {
    launch_reduce<T>(name, plan, in, out, SumOp<T, int64_t, int64_t>{out.data_ptr<int64_t>(), 1});
  }
}

// ---------------------------------------------------------------- max / min

// The running extreme a replaced by x (NaN sticks once seen).
template <typename V>
__device__ DP_INLINE V pick(bool is_max, V a, V x) {
  if constexpr (std::is_floating_point_v<V>) {
    if (x != x) return x;
  }
  return (is_max ? x > a : x < a) ? x : a;
}

template <typename V>
V extreme_identity(bool is_max) {
  if constexpr (std::numeric_limits<V>::has_infinity) return is_max ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
  else return is_max ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
}

template <typename T>
struct ExtremeOp {
  using V = compute_t<T>;
  using acc_t = V;
  T* out;
  V init;
  bool is_max;
  __device__ DP_INLINE V identity() const { return init; }
  __device__ DP_INLINE V step(V a, T v, int64_t) const { return pick(is_max, a, convert<V>(v)); }
  __device__ DP_INLINE V combine(V a, V b) const { return pick(is_max, a, b); }
  __device__ DP_INLINE void store(V a, int64_t o) const { out[o] = convert<T>(a); }
};

template <typename V>
struct ValIdx {
  V v;
  int64_t i;  // -1: nothing seen yet
};

template <typename T>
struct ExtremeIndexOp {
  using V = compute_t<T>;
  using acc_t = ValIdx<V>;
  T* values;         // may be null
  int64_t* indices;  // may be null
  V init;
  bool is_max;
  // x beats cur: larger (smaller), or NaN against a number.
  __device__ DP_INLINE bool better(V x, V cur) const {
    if constexpr (std::is_floating_point_v<V>) {
      if (x != x) return cur == cur;
      if (cur != cur) return false;
    }
    return is_max ? x > cur : x < cur;
  }
  __device__ DP_INLINE acc_t identity() const { return {init, -1}; }
  __device__ DP_INLINE acc_t step(acc_t a, T v, int64_t r) const {
    const V x = convert<V>(v);
    return (a.i < 0 || better(x, a.v)) ? acc_t{x, r} : a;  // r grows within a thread: ties keep the first
  }
  __device__ DP_INLINE acc_t combine(acc_t a, acc_t b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if (better(b.v, a.v)) return b;
    if (better(a.v, b.v)) return a;
    return b.i < a.i ? b : a;  // equal (or both NaN): the first index
  }
  __device__ DP_INLINE void store(acc_t a, int64_t o) const {
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
  __device__ DP_INLINE acc_t identity() const { return {A(0), A(0), 0}; }
  __device__ DP_INLINE acc_t step(acc_t a, T v, int64_t) const {  // Welford
    const A x = convert<A>(v);
    const int64_t n = a.n + 1;
    const A d = x - a.mean;
    const A mean = a.mean + d / static_cast<A>(n);
    return {mean, a.m2 + d * (x - mean), n};
  }
  __device__ DP_INLINE acc_t combine(acc_t a, acc_t b) const {  // Chan et al.
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const A d = b.mean - a.mean;
    const A fb = static_cast<A>(b.n) / static_cast<A>(n);
    return {a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<A>(a.n) * fb, n};
  }
  __device__ DP_INLINE void store(acc_t a, int64_t o) const {
    const A div = static_cast<A>(a.n) - correction;
    const A v = a.m2 / (div > A(0) ? div : A(0));  // 0/0 = nan (N <= correction with no spread), x/0 = inf
    out[o] = convert<T>(take_sqrt ? detail::acc_sqrt(v) : v);
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
__device__ DP_INLINE Lse<A> lse_combine(Lse<A> a, Lse<A> b) {
  const A inf = detail::acc_inf<A>();
  if (a.m != a.m || b.m != b.m) return {detail::acc_nan<A>(), A(0)};
  if (a.m == -inf) return b;
  if (b.m == -inf) return a;
  if (a.m == inf || b.m == inf) return {inf, A(1)};
  if (a.m >= b.m) return {a.m, a.s + b.s * detail::acc_exp(b.m - a.m)};
  return {b.m, b.s + a.s * detail::acc_exp(a.m - b.m)};
}

template <typename T>
struct LseOp {
  using A = facc_t<T>;
  using acc_t = Lse<A>;
  T* out;
  __device__ DP_INLINE acc_t identity() const { return {-detail::acc_inf<A>(), A(0)}; }
  __device__ DP_INLINE acc_t step(acc_t a, T v, int64_t) const {
    const A x = convert<A>(v);
    return lse_combine(a, acc_t{x, x == -detail::acc_inf<A>() ? A(0) : A(1)});
  }
  __device__ DP_INLINE acc_t combine(acc_t a, acc_t b) const { return lse_combine(a, b); }
  __device__ DP_INLINE void store(acc_t a, int64_t o) const {
    A r;
    if (a.m != a.m) r = a.m;
    else if (a.m == detail::acc_inf<A>() || a.m == -detail::acc_inf<A>()) r = a.m;
    else r = a.m + detail::acc_log(a.s);
    out[o] = convert<T>(r);
  }
};

// ---------------------------------------------------------------- norms

enum class NormKind { Zero, One, Two, Inf, NegInf, General };

template <typename T>
struct NormOp {
  using A = facc_t<T>;
  using acc_t = A;
  T* out;
  NormKind kind;
  A p;
  __device__ DP_INLINE A identity() const { return kind == NormKind::NegInf ? detail::acc_inf<A>() : A(0); }
  __device__ DP_INLINE A step(A a, T v, int64_t) const {
    const A x = detail::acc_abs(convert<A>(v));
    switch (kind) {
      case NormKind::Zero: return a + (x != A(0) ? A(1) : A(0));
      case NormKind::One: return a + x;
      case NormKind::Two: return a + x * x;
      case NormKind::Inf: return (x > a || x != x) ? x : a;
      case NormKind::NegInf: return (x < a || x != x) ? x : a;
      case NormKind::General: return a + detail::acc_pow(x, p);
    }
    return a;
  }
  __device__ DP_INLINE A combine(A a, A b) const {
    if (kind == NormKind::Inf) return (b > a || b != b) ? b : a;
    if (kind == NormKind::NegInf) return (b < a || b != b) ? b : a;
    return a + b;
  }
  __device__ DP_INLINE void store(A a, int64_t o) const {
    A r = a;
    if (kind == NormKind::Two) r = detail::acc_sqrt(a);
    else if (kind == NormKind::General) r = detail::acc_pow(a, A(1) / p);
    out[o] = convert<T>(r);
  }
};

}  // namespace

// ---------------------------------------------------------------- entry points

void sum_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  check_devices("sum", out, in);
  kernels::dispatch_all(in.dtype(), "sum", [&]<typename T>() {
    DP_CHECK(out.dtype() == (kernels::is_float_v<T> ? in.dtype() : kInt64), DTypeError, "sum: internal dtype mismatch");
    run_sum<T>("sum", out, in, reduced, keepdim, 1.0);
  });
}

void mean_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  check_devices("mean", out, in);
  const double n = static_cast<double>(kernels::reduced_numel(in.sizes(), reduced));
  kernels::dispatch_floating(in.dtype(), "mean", [&]<typename T>() { run_sum<T>("mean", out, in, reduced, keepdim, n); });
}

void minmax_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  check_devices(name, out, in);
  const kernels::ReducePlan plan = kernels::make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  kernels::dispatch_all(in.dtype(), name, [&]<typename T>() {
    using V = compute_t<T>;
    launch_reduce<T>(name, plan, in, out, ExtremeOp<T>{out.data_ptr<T>(), extreme_identity<V>(is_max), is_max});
  });
}

void minmax_index_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim, bool keepdim, bool is_max) {
  const char* name = indices.defined() && !values.defined() ? (is_max ? "argmax" : "argmin") : (is_max ? "max" : "min");
  const Tensor& shape_ref = values.defined() ? values : indices;
  check_devices(name, shape_ref, in);
  if (values.defined() && indices.defined()) {
    check_devices(name, indices, in);
    DP_CHECK(values.strides() == indices.strides(), ValueError, name, ": values and indices must share a layout");
  }
  std::vector<bool> reduced(static_cast<size_t>(in.dim()), false);
  if (in.dim() > 0) reduced[dim] = true;
  // One reduced dim: the reduced index r is the position along it, whatever the reordering.
  const kernels::ReducePlan plan = kernels::make_reduce_plan(shape_ref, in, reduced, keepdim, /*reorder=*/true);
  kernels::dispatch_all(in.dtype(), name, [&]<typename T>() {
    using V = compute_t<T>;
    ExtremeIndexOp<T> op{values.defined() ? values.data_ptr<T>() : nullptr, indices.defined() ? indices.data_ptr<int64_t>() : nullptr,
                         extreme_identity<V>(is_max), is_max};
    launch_reduce<T>(name, plan, in, shape_ref, op);
  });
}

void var_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, int64_t correction, bool take_sqrt) {
  const char* name = take_sqrt ? "std" : "var";
  check_devices(name, out, in);
  const kernels::ReducePlan plan = kernels::make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  kernels::dispatch_floating(in.dtype(), name, [&]<typename T>() {
    using A = facc_t<T>;
    launch_reduce<T>(name, plan, in, out, VarOp<T>{out.data_ptr<T>(), static_cast<A>(correction), take_sqrt});
  });
}

void logsumexp_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  check_devices("logsumexp", out, in);
  const kernels::ReducePlan plan = kernels::make_reduce_plan(out, in, reduced, keepdim, /*reorder=*/true);
  kernels::dispatch_floating(in.dtype(), "logsumexp", [&]<typename T>() { launch_reduce<T>("logsumexp", plan, in, out, LseOp<T>{out.data_ptr<T>()}); });
}

void norm_kernel(const Tensor& out, const Tensor& in, double p) {
  check_devices("norm", out, in);
  const std::vector<bool> reduced(static_cast<size_t>(in.dim()), true);
  const kernels::ReducePlan plan = kernels::make_reduce_plan(out, in, reduced, /*keepdim=*/false, /*reorder=*/true);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const NormKind kind = p == 0.0 ? NormKind::Zero : p == 1.0 ? NormKind::One : p == 2.0 ? NormKind::Two
                        : p == kInf ? NormKind::Inf : p == -kInf ? NormKind::NegInf : NormKind::General;
  kernels::dispatch_floating(in.dtype(), "norm", [&]<typename T>() {
    using A = facc_t<T>;
    launch_reduce<T>("norm", plan, in, out, NormOp<T>{out.data_ptr<T>(), kind, static_cast<A>(p)});
  });
}

}  // namespace dp::cuda
