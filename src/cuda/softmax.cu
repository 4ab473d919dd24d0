// CUDA softmax / log_softmax and their backward passes over one dim of contiguous tensors, in the
// layout cuda/reduce_config.h picks (choose_softmax_launch):
//  - rows (dim innermost): a warp (rows up to 1024) or a block per row; one pass keeps the running
//    max m and the sum s of exp(x - m), rescaling s when m grows (online softmax), the group
//    combines its (m, s) pairs, and a second pass writes the result;
//  - columns (dim not innermost): each thread column owns one (outer, inner) position, the block's
//    rows of threads split the dim, and the (m, s) pairs combine through shared memory.
// Special values follow the CPU kernel (and PyTorch): a NaN or +inf in a row makes the row NaN
// (inf - inf), a row of -inf is NaN (0 / 0), -inf elements give 0 (log_softmax: -inf).
// float16 / bfloat16 compute in float32, float64 in float64.
#include <cuda_runtime.h>
#include <algorithm>
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#include "core/kernels/dispatch.h"
#include "cuda/reduce.cuh"
#include "cuda/reduce.h"
#include "cuda/reduce_config.h"

namespace dp::cuda {
namespace {

using detail::SoftmaxLaunch;
using kernels::convert;

template <typename T> using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A>
struct MaxSum {
  A m, s;
};

// Folds x into the running (m, s).
template <typename A>
__device__ DP_INLINE MaxSum<A> online_step(MaxSum<A> a, A x) {
  if (x > a.m) return {x, a.s * detail::acc_exp(a.m - x) + detail::acc_exp(x - x)};  // exp(x - x): nan for x = +inf
  if (x == -detail::acc_inf<A>()) return a;                                          // contributes 0 (and no inf - inf)
  return {a.m, a.s + detail::acc_exp(x - a.m)};                                      // NaN x: s becomes NaN
}

template <typename A>
__device__ DP_INLINE MaxSum<A> online_combine(MaxSum<A> a, MaxSum<A> b) {
  const A m = a.m > b.m ? a.m : b.m;
  if (m == -detail::acc_inf<A>()) return {m, a.s + b.s};  // nothing but -inf (and NaN, which s carries)
  const A fa = a.m == m ? A(1) : detail::acc_exp(a.m - m);
  const A fb = b.m == m ? A(1) : detail::acc_exp(b.m - m);
  return {m, a.s * fa + b.s * fb};
}

template <typename A>
struct OnlineCombine {
  __device__ DP_INLINE MaxSum<A> operator()(const MaxSum<A>& a, const MaxSum<A>& b) const { return online_combine(a, b); }
};

template <typename A>
struct Plus {
  __device__ DP_INLINE A operator()(const A& a, const A& b) const { return a + b; }
};

// The final value of element x given the row's (m, s).
template <bool Log, typename A>
__device__ DP_INLINE A softmax_value(A x, MaxSum<A> ms) {
  if constexpr (Log) return (x - ms.m) - detail::acc_log(ms.s);  // (x - max) - log(sum): no rounding at max's magnitude
  else return detail::acc_exp(x - ms.m) / ms.s;
}

// Rows of n contiguous elements; blockDim (block_x, block_y): block_x threads per row.
template <typename T, bool Log>
__global__ void __launch_bounds__(detail::kReduceThreads) softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n, SoftmaxLaunch l) {
  using A = facc_t<T>;
  __shared__ MaxSum<A> smem[detail::kReduceThreads / 32];
  const int tx = static_cast<int>(threadIdx.x);
  for (int64_t g = blockIdx.x; g < l.groups; g += gridDim.x) {
    const int64_t row = g * l.block_y + threadIdx.y;
    const bool live = row < rows;
    const T* xr = x + (live ? row : 0) * n;
    MaxSum<A> ms{-detail::acc_inf<A>(), A(0)};
    if (live) {
#pragma unroll 4
      for (int64_t j = tx; j < n; j += l.block_x) ms = online_step(ms, convert<A>(xr[j]));
    }
    ms = detail::group_allreduce(ms, l.block_x, smem, OnlineCombine<A>{});
    if (live) {
      T* yr = y + row * n;
      for (int64_t j = tx; j < n; j += l.block_x) yr[j] = convert<T>(softmax_value<Log>(convert<A>(xr[j]), ms));
    }
  }
}

// Columns: position c in [0, outer * inner) is (o, j) = (c / inner, c % inner), its elements at
// o * n * inner + j + d * inner for d < n. blockDim (block_x, block_y): block_x consecutive
// columns, block_y threads splitting d.
template <typename T, bool Log>
__global__ void __launch_bounds__(detail::kReduceThreads)
    softmax_cols_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n, int64_t inner, SoftmaxLaunch l) {
  using A = facc_t<T>;
  __shared__ MaxSum<A> smem[detail::kReduceThreads];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t cols = outer * inner;
  for (int64_t g = blockIdx.x; g < l.groups; g += gridDim.x) {
    const int64_t c = g * l.block_x + tx;
    const bool live = c < cols;
    const int64_t o = live ? c / inner : 0;
    const int64_t base = live ? o * n * inner + (c - o * inner) : 0;
    MaxSum<A> ms{-detail::acc_inf<A>(), A(0)};
    if (live) {
#pragma unroll 4
      for (int64_t d = ty; d < n; d += l.block_y) ms = online_step(ms, convert<A>(x[base + d * inner]));
    }
    if (l.block_y > 1) {
      smem[ty * l.block_x + tx] = ms;
      __syncthreads();
      if (ty == 0) {
        for (int k = 1; k < l.block_y; ++k) ms = online_combine(ms, smem[k * l.block_x + tx]);
        smem[tx] = ms;
      }
      __syncthreads();
      ms = smem[tx];
      __syncthreads();
    }
    if (live)
      for (int64_t d = ty; d < n; d += l.block_y) y[base + d * inner] = convert<T>(softmax_value<Log>(convert<A>(x[base + d * inner]), ms));
  }
}

// Backward, per element given the row's reduction t:
//   softmax:     t = sum(g * y), gi = y * (g - t)
//   log_softmax: t = sum(g),     gi = g - exp(y) * t
template <bool Log, typename A>
__device__ DP_INLINE A backward_term(A g, A y) {
  if constexpr (Log) return g;
  else return g * y;
}
template <bool Log, typename A>
__device__ DP_INLINE A backward_value(A g, A y, A t) {
  if constexpr (Log) return g - detail::acc_exp(y) * t;
  else return y * (g - t);
}

template <typename T, bool Log>
__global__ void __launch_bounds__(detail::kReduceThreads) softmax_backward_rows_kernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ gi,
                                                                                      int64_t rows, int64_t n, SoftmaxLaunch l) {
  using A = facc_t<T>;
  __shared__ A smem[detail::kReduceThreads / 32];
  const int tx = static_cast<int>(threadIdx.x);
  for (int64_t gr = blockIdx.x; gr < l.groups; gr += gridDim.x) {
    const int64_t row = gr * l.block_y + threadIdx.y;
    const bool live = row < rows;
    const int64_t off = (live ? row : 0) * n;
    A t = A(0);
    if (live) {
#pragma unroll 4
      for (int64_t j = tx; j < n; j += l.block_x) t += backward_term<Log>(convert<A>(g[off + j]), convert<A>(y[off + j]));
    }
    t = detail::group_allreduce(t, l.block_x, smem, Plus<A>{});
    if (live)
      for (int64_t j = tx; j < n; j += l.block_x) gi[off + j] = convert<T>(backward_value<Log>(convert<A>(g[off + j]), convert<A>(y[off + j]), t));
  }
}

template <typename T, bool Log>
__global__ void __launch_bounds__(detail::kReduceThreads) softmax_backward_cols_kernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ gi,
                                                                                      int64_t outer, int64_t n, int64_t inner, SoftmaxLaunch l) {
  using A = facc_t<T>;
  __shared__ A smem[detail::kReduceThreads];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t cols = outer * inner;
  for (int64_t gr = blockIdx.x; gr < l.groups; gr += gridDim.x) {
    const int64_t c = gr * l.block_x + tx;
    const bool live = c < cols;
    const int64_t o = live ? c / inner : 0;
    const int64_t base = live ? o * n * inner + (c - o * inner) : 0;
    A t = A(0);
    if (live) {
#pragma unroll 4
      for (int64_t d = ty; d < n; d += l.block_y) {
        const int64_t i = base + d * inner;
        t += backward_term<Log>(convert<A>(g[i]), convert<A>(y[i]));
      }
    }
    if (l.block_y > 1) {
      smem[ty * l.block_x + tx] = t;
      __syncthreads();
      if (ty == 0) {
        for (int k = 1; k < l.block_y; ++k) t += smem[k * l.block_x + tx];
        smem[tx] = t;
      }
      __syncthreads();
      t = smem[tx];
      __syncthreads();
    }
    if (live)
      for (int64_t d = ty; d < n; d += l.block_y) {
        const int64_t i = base + d * inner;
        gi[i] = convert<T>(backward_value<Log>(convert<A>(g[i]), convert<A>(y[i]), t));
      }
  }
}

struct Geometry {
  int64_t outer = 1, dsize = 1, inner = 1;
};

Geometry geometry(const Tensor& t, int64_t dim) {
  Geometry g;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim) g.outer *= t.sizes()[d];
    else if (d == dim) g.dsize = t.sizes()[d];
    else g.inner *= t.sizes()[d];
  }
  return g;
}

void check_devices(const char* name, const Tensor& out, std::initializer_list<const Tensor*> ins) {
  for (const Tensor* t : ins)
    DP_CHECK(t->device() == out.device(), DeviceError, name, ": expected all tensors to be on the same device, but found at least two devices, ",
             out.device().str(), " and ", t->device().str(), "!");
}

}  // namespace

void softmax_kernel(const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_devices(name, out, {&in});
  if (in.numel() == 0) return;
  const Geometry geo = geometry(in, dim);
  const SoftmaxLaunch l = detail::choose_softmax_launch(geo.outer, geo.dsize, geo.inner);
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev).handle();
  const dim3 grid(static_cast<unsigned>(l.grid_x)), block(l.block_x, l.block_y);
  kernels::dispatch_floating(in.dtype(), name, [&]<typename T>() {
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    if (l.rows) {
      if (log) softmax_rows_kernel<T, true><<<grid, block, 0, stream>>>(x, y, geo.outer, geo.dsize, l);
      else softmax_rows_kernel<T, false><<<grid, block, 0, stream>>>(x, y, geo.outer, geo.dsize, l);
    } else {
      if (log) softmax_cols_kernel<T, true><<<grid, block, 0, stream>>>(x, y, geo.outer, geo.dsize, geo.inner, l);
      else softmax_cols_kernel<T, false><<<grid, block, 0, stream>>>(x, y, geo.outer, geo.dsize, geo.inner, l);
    }
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void softmax_backward_kernel(const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim, bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  check_devices(name, gin, {&g, &y});
  if (y.numel() == 0) return;
  const Geometry geo = geometry(y, dim);
  const SoftmaxLaunch l = detail::choose_softmax_launch(geo.outer, geo.dsize, geo.inner);
  const int dev = gin.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev).handle();
  const dim3 grid(static_cast<unsigned>(l.grid_x)), block(l.block_x, l.block_y);
  kernels::dispatch_floating(y.dtype(), name, [&]<typename T>() {
    const T* gp = static_cast<const T*>(g.data_ptr());
    const T* yp = static_cast<const T*>(y.data_ptr());
    T* op = static_cast<T*>(gin.data_ptr());
    if (l.rows) {
      if (log) softmax_backward_rows_kernel<T, true><<<grid, block, 0, stream>>>(gp, yp, op, geo.outer, geo.dsize, l);
      else softmax_backward_rows_kernel<T, false><<<grid, block, 0, stream>>>(gp, yp, op, geo.outer, geo.dsize, l);
    } else {
      if (log) softmax_backward_cols_kernel<T, true><<<grid, block, 0, stream>>>(gp, yp, op, geo.outer, geo.dsize, geo.inner, l);
      else softmax_backward_cols_kernel<T, false><<<grid, block, 0, stream>>>(gp, yp, op, geo.outer, geo.dsize, geo.inner, l);
    }
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dp::cuda
