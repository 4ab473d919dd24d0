#pragma once
// DP_CUDA_CHECK(cudaMalloc(&p, n)): a CUDA runtime call whose error becomes a dp exception naming
// the call, the error and the place: OutOfMemory for cudaErrorMemoryAllocation, DeviceError for
// everything else. Needs the CUDA headers (only for code built with the CUDA backend).
#include <cuda_runtime_api.h>

namespace dp::cuda::detail {
// Clears the runtime's last error (for non-sticky errors) and throws.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
}  // namespace dp::cuda::detail

#define DP_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    const cudaError_t dp_cuda_err_ = (call);                                         \
    if (__builtin_expect(dp_cuda_err_ != cudaSuccess, 0)) {                          \
      ::dp::cuda::detail::throw_cuda_error(dp_cuda_err_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)
