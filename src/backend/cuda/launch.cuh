#pragma once
// The CUDA element-wise launch: CudaLaunch::run<Out, In...>(out, f, in...) computes
// out[i] = f(in[i]...) with the inputs broadcast to out's shape, for any strides, with the same
// contract as the CPU's backend::cpu::launch (backend/cpu/elementwise_loops.h): every operand already
// has the element type given, out may be exactly one of the inputs, never a partial overlap.
//
//  - Contiguous fast path: out and every input contiguous with out's element count: a grid-stride
//    loop over typed pointers, 32-bit indices when the count fits.
//  - Otherwise an OffsetCalculator (offset_calculator.h) turns the linear index into each operand's
//    byte offset, over the coalesced dims, with 32-bit index math (byte offsets are 64-bit); a
//    larger tensor is split along its outer dims into pieces that fit, so each functor has two
//    kernels only (the CUDA compile time is per instantiated kernel).
//  - The kernel is queued on the current stream of out's device; nothing waits for it (no
//    device-wide synchronisation). Inputs must be on out's device; a CPU input with one element
//    (a 0-dim "scalar tensor", as PyTorch allows) is copied to the device first; anything else is
//    PyTorch's "Expected all tensors to be on the same device" error.
#include <cuda_runtime.h>
#include <cstdint>
#include <utility>
#include "dp/core/tensor.h"
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"
#include "backend/cuda/offset_calculator.h"

namespace dp::backend::cuda::detail {

constexpr int kThreads = 256;

// Streaming multiprocessors of logical device `device` (its GPU's; read once per device).
int multiprocessor_count(int device);
// Blocks for n elements: enough to fill the device, grid-stride beyond that.
unsigned grid_for(int64_t n, int device);

template <int N>
struct Pointers {
  char* p[N];
};

template <typename... T>
struct Types {};

template <typename Out, typename I, typename F, typename... In>
__global__ void __launch_bounds__(kThreads) contiguous_kernel(I n, F f, Out* out, const In*... in) {
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I i = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) out[i] = f(in[i]...);
}

template <typename Out, typename... In, typename F, int N, typename Offs, size_t... K>
__device__ DP_INLINE void strided_one(const F& f, const Pointers<N>& p, const Offs& o, std::index_sequence<K...>) {
  *reinterpret_cast<Out*>(p.p[0] + o.v[0]) = f(*reinterpret_cast<const In*>(p.p[K + 1] + o.v[K + 1])...);
}

template <typename Out, typename I, typename F, int N, typename... In>
__global__ void __launch_bounds__(kThreads) strided_kernel(I n, F f, Pointers<N> p, OffsetCalculator<N, I> oc, Types<In...>) {
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I i = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const auto o = oc.get(i);
    strided_one<Out, In...>(f, p, o, std::index_sequence_for<In...>{});
  }
}

// An input as the kernels need it: on out's device (CPU one-element tensors copied over).
Tensor on_device_of(const char* what, const Tensor& out, const Tensor& in);

template <int N, typename I>
OffsetCalculator<N, I> offsets_for(const Tensor& out, const Tensor* const* ops) {
  const int nd = static_cast<int>(out.dim());
  int64_t strides[N][64];
  const int64_t* rows[N];
  DP_CHECK(nd <= 64, NotImplementedError, "CUDA element-wise kernel: ", nd, " dims are more than supported (64)");
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *ops[k];
    const int td = static_cast<int>(t.dim());
    const int64_t es = static_cast<int64_t>(t.element_size());
    for (int d = 0; d < nd; ++d) {
      const int sd = d - (nd - td);  // t's dim aligned from the right
      strides[k][d] = (sd < 0 || t.sizes()[sd] == 1) ? 0 : t.strides()[sd] * es;
    }
    rows[k] = strides[k];
  }
  return make_offset_calculator<N, I>(nd, out.sizes().data(), rows);
}

struct CudaLaunch {
  template <typename Out, typename... In, typename F, typename... Ts>
  static void run(const Tensor& out, const F& f, const Ts&... in_) {
    static_assert(sizeof...(In) == sizeof...(Ts), "run: one element type per input");
    constexpr int N = sizeof...(In) + 1;
    const int64_t n = out.numel();
    if (n == 0) return;
    const int dev = out.device().index;
    DeviceGuard guard(dev);
    // Inputs on out's device (owned handles keep copied scalars alive until the launch).
    const Tensor ins[N - 1] = {on_device_of("element-wise op", out, in_)...};
    cudaStream_t stream = current_stream(dev).handle();
    const unsigned blocks = grid_for(n, dev);
    bool contiguous = out.is_contiguous();
    for (int k = 0; k < N - 1; ++k) contiguous = contiguous && ins[k].is_contiguous() && ins[k].numel() == n;
    [&]<size_t... K>(std::index_sequence<K...>) {
      if (contiguous) {
        // 32-bit indices only: a larger tensor goes in chunks.
        constexpr int64_t kChunk = int64_t{1} << 30;
        for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
          const int64_t m = n - i0 < kChunk ? n - i0 : kChunk;
          contiguous_kernel<Out><<<grid_for(m, dev), kThreads, 0, stream>>>(static_cast<uint32_t>(m), f, static_cast<Out*>(out.data_ptr()) + i0,
                                                                            static_cast<const In*>(ins[K].data_ptr()) + i0...);
        }
      } else if (n > INT32_MAX) {
        // 32-bit index math only: split along the outermost dim of size > 1 into pieces of at most
        // 2^30 elements (a piece still too large is split again along a deeper dim).
        int64_t d = 0;
        while (out.sizes()[d] == 1) ++d;
        const int64_t rows = out.sizes()[d], inner = n / rows;
        const int64_t step = inner >= (int64_t{1} << 30) ? 1 : (int64_t{1} << 30) / inner;
        for (int64_t r0 = 0; r0 < rows; r0 += step) {
          const int64_t len = rows - r0 < step ? rows - r0 : step;
          auto piece = [&](const Tensor& t) {
            const int64_t td = d - (out.dim() - t.dim());  // t's dim aligned from the right
            return (td < 0 || t.sizes()[td] == 1) ? t : t.narrow(td, r0, len);
          };
          run<Out, In...>(out.narrow(d, r0, len), f, piece(ins[K])...);
        }
      } else {
        const Tensor* ops[N] = {&out, &ins[K]...};
        Pointers<N> p{{static_cast<char*>(out.data_ptr()), static_cast<char*>(ins[K].data_ptr())...}};
        strided_kernel<Out><<<blocks, kThreads, 0, stream>>>(static_cast<uint32_t>(n), f, p, offsets_for<N, uint32_t>(out, ops), Types<In...>{});
      }
    }
    (std::make_index_sequence<N - 1>{});
    DP_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace dp::backend::cuda::detail
