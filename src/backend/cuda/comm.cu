// sum_into (src/backend/cuda/comm.h): a k-way element-wise sum that reads every input once, for the gradient
// reduction of DataParallel where NCCL is not used (virtual devices on one GPU, no NCCL build).
#include <cuda_runtime.h>
#include "backend/dispatch.h"
#include "backend/cuda/comm.h"
#include "backend/cuda/launch.cuh"

namespace dp::backend::cuda {
namespace {

constexpr int kMaxInputs = 8;  // per launch; more inputs are folded in by further launches

template <typename T>
struct Inputs {
  const T* p[kMaxInputs];
};

template <typename T>
__global__ void __launch_bounds__(detail::kThreads) sum_kernel(uint32_t n, T* out, Inputs<T> in, int k) {
  using Acc = std::conditional_t<backend::is_reduced_float_v<T>, float, T>;
  const uint32_t stride = gridDim.x * detail::kThreads;
  for (uint32_t i = blockIdx.x * detail::kThreads + threadIdx.x; i < n; i += stride) {
    if constexpr (std::is_same_v<T, bool>) {
      bool acc = false;
      for (int j = 0; j < k; ++j) acc = acc || in.p[j][i];
      out[i] = acc;
    } else {
      Acc acc = backend::convert<Acc>(in.p[0][i]);
      for (int j = 1; j < k; ++j) acc += backend::convert<Acc>(in.p[j][i]);
      out[i] = backend::convert<T>(acc);
    }
  }
}

}  // namespace

void sum_into(void* out_raw, const std::vector<const void*>& ins, int64_t n, DType dtype, const Stream& stream) {
  DP_CHECK(!ins.empty(), ValueError, "sum_into: no inputs");
  if (n <= 0) return;
  const int dev = stream.device();
  DeviceGuard guard(dev);
  backend::dispatch_all(dtype, "reduce_add (CUDA)", [&]<typename T>() {
    T* out = static_cast<T*>(out_raw);
    // 32-bit indices: larger buffers go in pieces of 2^30 elements.
    constexpr int64_t kPiece = int64_t{1} << 30;
    for (int64_t i0 = 0; i0 < n; i0 += kPiece) {
      const int64_t m = n - i0 < kPiece ? n - i0 : kPiece;
      size_t next = 0;
      bool first = true;
      while (next < ins.size()) {
        // The first launch takes up to kMaxInputs inputs; each later one adds to what out holds.
        Inputs<T> in{};
        int k = 0;
        if (!first) in.p[k++] = out + i0;
        while (k < kMaxInputs && next < ins.size()) in.p[k++] = static_cast<const T*>(ins[next++]) + i0;
        sum_kernel<T><<<detail::grid_for(m, dev), detail::kThreads, 0, stream.handle()>>>(static_cast<uint32_t>(m), out + i0, in, k);
        DP_CUDA_CHECK(cudaGetLastError());
        first = false;
      }
    }
  });
}

}  // namespace dp::backend::cuda
