// Basic kernels: fill_u32 (memset of 32-bit words) and sleep_cycles (a spinning kernel for tests).
// The only .cu file so far; it also proves the sm_80 / sm_90 / PTX build.
#include <cuda_runtime.h>
#include "dp/core/errors.h"
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"

namespace dp::cuda {
namespace {

__global__ void fill_u32_kernel(uint32_t* dst, uint32_t value, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) dst[i] = value;
}

__global__ void sleep_kernel(int64_t cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

void fill_u32(void* dst, uint32_t value, size_t n, const Stream& stream) {
  if (n == 0) return;
  DeviceGuard guard(stream.device());
  constexpr int kThreads = 256;
  const size_t blocks_needed = (n + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(blocks_needed < 65535 ? blocks_needed : 65535);
  fill_u32_kernel<<<blocks, kThreads, 0, stream.handle()>>>(static_cast<uint32_t*>(dst), value, n);
  DP_CUDA_CHECK(cudaGetLastError());
}

namespace detail {
void sleep_cycles(int64_t cycles, const Stream& stream) {
  DeviceGuard guard(stream.device());
  sleep_kernel<<<1, 1, 0, stream.handle()>>>(cycles);
  DP_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dp::cuda
