// CUDA softmax / log_softmax and their backward passes over one dim of contiguous tensors, in the
// layout cuda/reduce_config.h picks (choose_softmax_launch), with the per-element math of
// cuda/reduce_ops.h (shared with the host tests' emulation):
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
#include "backend/cuda/runtime_api.h"
#include "backend/dispatch.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/reduce.h"
#include "backend/cuda/reduce_config.h"
#include "backend/cuda/reduce_ops.h"
#include "backend/reduce_kernels.h"

namespace dp::backend::cuda {
namespace {

using detail::facc_t;
using detail::MaxSum;
using detail::SoftmaxLaunch;
using backend::convert;

template <typename A>
struct OnlineCombine {
  __device__ DP_INLINE MaxSum<A> operator()(const MaxSum<A>& a, const MaxSum<A>& b) const { return detail::online_combine(a, b); }
};

template <typename A>
struct Plus {
  __device__ DP_INLINE A operator()(const A& a, const A& b) const { return a + b; }
};

// Rows of n contiguous elements; blockDim (block_x, block_y): block_x threads per row.
template <typename T, bool Log>
__global__ void __launch_bounds__(detail::kReduceThreads)
    softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n, SoftmaxLaunch l) {
  using A = facc_t<T>;
  __shared__ MaxSum<A> smem[detail::kReduceThreads / 32];
  const int tx = static_cast<int>(threadIdx.x);
  for (int64_t g = blockIdx.x; g < l.groups; g += gridDim.x) {
    const int64_t row = g * l.block_y + threadIdx.y;
    const bool live = row < rows;
    const T* xr = x + (live ? row : 0) * n;
    MaxSum<A> ms = detail::max_sum_identity<A>();
    if (live) {
#pragma unroll 4
      for (int64_t j = tx; j < n; j += l.block_x) ms = detail::online_step(ms, convert<A>(xr[j]));
    }
    ms = detail::group_allreduce(ms, l.block_x, smem, OnlineCombine<A>{});
    if (live) {
      T* yr = y + row * n;
      for (int64_t j = tx; j < n; j += l.block_x) yr[j] = convert<T>(detail::softmax_value<Log>(convert<A>(xr[j]), ms));
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
    MaxSum<A> ms = detail::max_sum_identity<A>();
    if (live) {
#pragma unroll 4
      for (int64_t d = ty; d < n; d += l.block_y) ms = detail::online_step(ms, convert<A>(x[base + d * inner]));
    }
    if (l.block_y > 1) {
      smem[ty * l.block_x + tx] = ms;
      __syncthreads();
      if (ty == 0) {
        for (int k = 1; k < l.block_y; ++k) ms = detail::online_combine(ms, smem[k * l.block_x + tx]);
        smem[tx] = ms;
      }
      __syncthreads();
      ms = smem[tx];
      __syncthreads();
    }
    if (live)
      for (int64_t d = ty; d < n; d += l.block_y) y[base + d * inner] = convert<T>(detail::softmax_value<Log>(convert<A>(x[base + d * inner]), ms));
  }
}

template <typename T, bool Log>
__global__ void __launch_bounds__(detail::kReduceThreads)
    softmax_backward_rows_kernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ gi, int64_t rows, int64_t n, SoftmaxLaunch l) {
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
      for (int64_t j = tx; j < n; j += l.block_x) t += detail::backward_term<Log>(convert<A>(g[off + j]), convert<A>(y[off + j]));
    }
    t = detail::group_allreduce(t, l.block_x, smem, Plus<A>{});
    if (live)
      for (int64_t j = tx; j < n; j += l.block_x)
        gi[off + j] = convert<T>(detail::backward_value<Log>(convert<A>(g[off + j]), convert<A>(y[off + j]), t));
  }
}

template <typename T, bool Log>
__global__ void __launch_bounds__(detail::kReduceThreads)
    softmax_backward_cols_kernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ gi, int64_t outer, int64_t n, int64_t inner,
                                 SoftmaxLaunch l) {
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
        t += detail::backward_term<Log>(convert<A>(g[i]), convert<A>(y[i]));
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
        gi[i] = convert<T>(detail::backward_value<Log>(convert<A>(g[i]), convert<A>(y[i]), t));
      }
  }
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
  if (!backend::check_softmax_args(out, in, log)) return;
  const backend::SoftmaxGeometry geo = backend::softmax_geometry(in, dim);
  const SoftmaxLaunch l = detail::choose_softmax_launch(geo.outer, geo.dsize, geo.inner);
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev).handle();
  const dim3 grid(static_cast<unsigned>(l.grid_x)), block(l.block_x, l.block_y);
  backend::dispatch_floating(in.dtype(), name, [&]<typename T>() {
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    if (l.rows) {
      if (log)
        softmax_rows_kernel<T, true><<<grid, block, 0, stream>>>(x, y, geo.outer, geo.dsize, l);
      else
        softmax_rows_kernel<T, false><<<grid, block, 0, stream>>>(x, y, geo.outer, geo.dsize, l);
    } else {
      if (log)
        softmax_cols_kernel<T, true><<<grid, block, 0, stream>>>(x, y, geo.outer, geo.dsize, geo.inner, l);
      else
        softmax_cols_kernel<T, false><<<grid, block, 0, stream>>>(x, y, geo.outer, geo.dsize, geo.inner, l);
    }
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void softmax_backward_kernel(const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim, bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  check_devices(name, gin, {&g, &y});
  if (!backend::check_softmax_backward_args(gin, g, y, log)) return;
  const backend::SoftmaxGeometry geo = backend::softmax_geometry(y, dim);
  const SoftmaxLaunch l = detail::choose_softmax_launch(geo.outer, geo.dsize, geo.inner);
  const int dev = gin.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev).handle();
  const dim3 grid(static_cast<unsigned>(l.grid_x)), block(l.block_x, l.block_y);
  backend::dispatch_floating(y.dtype(), name, [&]<typename T>() {
    const T* gp = static_cast<const T*>(g.data_ptr());
    const T* yp = static_cast<const T*>(y.data_ptr());
    T* op = static_cast<T*>(gin.data_ptr());
    if (l.rows) {
      if (log)
        softmax_backward_rows_kernel<T, true><<<grid, block, 0, stream>>>(gp, yp, op, geo.outer, geo.dsize, l);
      else
        softmax_backward_rows_kernel<T, false><<<grid, block, 0, stream>>>(gp, yp, op, geo.outer, geo.dsize, l);
    } else {
      if (log)
        softmax_backward_cols_kernel<T, true><<<grid, block, 0, stream>>>(gp, yp, op, geo.outer, geo.dsize, geo.inner, l);
      else
        softmax_backward_cols_kernel<T, false><<<grid, block, 0, stream>>>(gp, yp, op, geo.outer, geo.dsize, geo.inner, l);
    }
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dp::backend::cuda
