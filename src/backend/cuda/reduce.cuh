#pragma once
// Device-only helpers shared by the reduction (reduce.cu) and softmax (softmax.cu) kernels: a warp
// shuffle of any accumulator struct, and warp and block reductions in a fixed order (the same bits
// every run). tests/cuda/test_cuda_reduce.cpp emulates the same order on the host.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstring>
#include "dp/core/macros.h"

namespace dp::backend::cuda::detail {

// __shfl_down_sync / __shfl_sync of any trivially copyable value, 32 bits at a time.
template <typename A>
__device__ DP_INLINE A shfl_down(const A& a, int delta) {
  constexpr int kWords = (sizeof(A) + 3) / 4;
  uint32_t w[kWords] = {};
  memcpy(w, &a, sizeof(A));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_down_sync(0xffffffffu, w[k], delta);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

template <typename A>
__device__ DP_INLINE A shfl_from(const A& a, int lane) {
  constexpr int kWords = (sizeof(A) + 3) / 4;
  uint32_t w[kWords] = {};
  memcpy(w, &a, sizeof(A));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_sync(0xffffffffu, w[k], lane);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

// Lane 0 gets combine over the warp's 32 values (a tree: lane i with lane i + 16, then + 8, ...).
// Every lane of the warp must call it.
template <typename A, typename C>
__device__ DP_INLINE A warp_reduce(A a, const C& combine) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) a = combine(a, shfl_down(a, d));
  return a;
}

// Every thread of a group of `width` consecutive threads (threadIdx.x in [0, width), width a power
// of two in [32, 1024], one group per threadIdx.y) gets the combination of the group's values.
// smem: room for blockDim.x * blockDim.y / 32 values. Every thread of the block must call it
// (it synchronises the block when width > 32).
template <typename A, typename C>
__device__ DP_INLINE A group_allreduce(A a, int width, A* smem, const C& combine) {
  a = warp_reduce(a, combine);
  if (width == 32) return shfl_from(a, 0);
  const int warps = width / 32;
  const int first = threadIdx.y * warps;  // this group's first warp
  if ((threadIdx.x & 31) == 0) smem[first + (threadIdx.x >> 5)] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    A t = smem[first];
    for (int k = 1; k < warps; ++k) t = combine(t, smem[first + k]);
    smem[first] = t;
  }
  __syncthreads();
  a = smem[first];
  __syncthreads();  // smem is reused by the caller's next round
  return a;
}

}  // namespace dp::backend::cuda::detail
