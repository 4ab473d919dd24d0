// CUDA copy (strided, broadcasting, dtype-converting) and fill kernels, and the Philox random fills.
#include <cuda_runtime.h>
#include <cstring>
#include "backend/copy_kernels.h"
#include "backend/elementwise_impl.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.cuh"
#include "core/philox.h"
#include "backend/cuda/random.h"

namespace dp::backend::cuda {

using detail::CudaLaunch;
using detail::kThreads;

namespace {

// An unsigned type of each element size: same-dtype copies move bits.
template <size_t S>
struct Bits;
template <>
struct Bits<1> {
  using type = uint8_t;
};
template <>
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};
template <>
struct Bits<8> {
  using type = uint64_t;
};

template <typename To, typename From>
struct ConvertF {
  DP_HOST_DEVICE DP_INLINE To operator()(From v) const { return backend::convert<To>(v); }
};

template <typename To, typename From>
__global__ void __launch_bounds__(kThreads) convert_kernel(uint32_t n, To* out, const From* in) {
  const uint32_t stride = gridDim.x * kThreads;
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) out[i] = backend::convert<To>(in[i]);
}

// Same dtype, any layout (bits moved).
void copy_same(const Tensor& dst, const Tensor& src) {
  switch (dst.element_size()) {
    case 1:
      CudaLaunch::run<uint8_t, uint8_t>(dst, backend::impl::IdF<uint8_t>{}, src);
      return;
    case 2:
      CudaLaunch::run<uint16_t, uint16_t>(dst, backend::impl::IdF<uint16_t>{}, src);
      return;
    case 4:
      CudaLaunch::run<uint32_t, uint32_t>(dst, backend::impl::IdF<uint32_t>{}, src);
      return;
    case 8:
      CudaLaunch::run<uint64_t, uint64_t>(dst, backend::impl::IdF<uint64_t>{}, src);
      return;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) fill_bits_kernel(uint32_t n, T* out, T v) {
  const uint32_t stride = gridDim.x * kThreads;
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) out[i] = v;
}

}  // namespace

void copy_on_device(const Tensor& dst, const Tensor& src_in) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(dst.device().index);
  const Tensor src = detail::on_device_of("copy_", dst, src_in);
  if (dst.dtype() == src.dtype()) {
    copy_same(dst, src);
    return;
  }
  // Converting: the source broadcast into a contiguous buffer of its dtype (if it is not one
  // already), a contiguous conversion, then a layout copy into dst (if it is not contiguous).
  Tensor s = src.is_contiguous() && src.numel() == n ? src : make_empty(dst.sizes(), src.dtype(), dst.device());
  if (!s.is_same(src)) copy_same(s, src);
  Tensor d = dst.is_contiguous() ? dst : make_empty(dst.sizes(), dst.dtype(), dst.device());
  cudaStream_t stream = current_stream(dst.device().index).handle();
  constexpr int64_t kChunk = int64_t{1} << 30;
  backend::dispatch_all(d.dtype(), "copy_", [&]<typename To>() {
    backend::dispatch_all(s.dtype(), "copy_", [&]<typename From>() {
      if constexpr (!std::is_same_v<To, From>) {
        for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
          const int64_t m = n - i0 < kChunk ? n - i0 : kChunk;
          convert_kernel<To, From><<<detail::grid_for(m, dst.device().index), kThreads, 0, stream>>>(
              static_cast<uint32_t>(m), static_cast<To*>(d.data_ptr()) + i0, static_cast<const From*>(s.data_ptr()) + i0);
        }
      }
    });
  });
  DP_CUDA_CHECK(cudaGetLastError());
  if (!d.is_same(dst)) copy_same(dst, d);
}

void fill_kernel(const Tensor& dst, const Scalar& value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int dev = dst.device().index;
  DeviceGuard guard(dev);
  uint64_t bits = 0;
  backend::dispatch_all(dst.dtype(), "fill_", [&]<typename T>() {
    const T v = backend::scalar_to<T>(value);
    std::memcpy(&bits, &v, sizeof(T));
  });
  Tensor d = dst.is_contiguous() ? dst : make_empty(dst.sizes(), dst.dtype(), dst.device());
  cudaStream_t stream = current_stream(dev).handle();
  constexpr int64_t kChunk = int64_t{1} << 30;
  auto run = [&]<typename B>() {
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t m = n - i0 < kChunk ? n - i0 : kChunk;
      fill_bits_kernel<B>
          <<<detail::grid_for(m, dev), kThreads, 0, stream>>>(static_cast<uint32_t>(m), static_cast<B*>(d.data_ptr()) + i0, static_cast<B>(bits));
    }
  };
  switch (dst.element_size()) {
    case 1:
      run.template operator()<uint8_t>();
      break;
    case 2:
      run.template operator()<uint16_t>();
      break;
    case 4:
      run.template operator()<uint32_t>();
      break;
    default:
      run.template operator()<uint64_t>();
      break;
  }
  DP_CUDA_CHECK(cudaGetLastError());
  if (!d.is_same(dst)) copy_same(dst, d);
}

// ---------------------------------------------------------------- random

namespace {

// Element i of the CPU's stream layout (src/ops/random.cpp), one thread per element; the word
// mappings are the CPU's own (core/philox.h).
template <typename T>
__global__ void __launch_bounds__(kThreads) uniform_kernel(uint64_t n, T* out, uint64_t seed, uint64_t first, double from, double range) {
  constexpr int per_block = philox::uniform_per_block<T>();
  const uint64_t stride = uint64_t(gridDim.x) * kThreads;
  for (uint64_t i = uint64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    uint32_t w[4];
    philox::rounds(seed, first + i / per_block, w);
    out[i] = backend::convert<T>(from + range * philox::uniform_unit<T>(w, static_cast<int>(i % per_block)));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) normal_kernel(uint64_t n, T* out, uint64_t seed, uint64_t first, double mean, double std) {
  const uint64_t stride = uint64_t(gridDim.x) * kThreads;
  for (uint64_t i = uint64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    uint32_t w[4];
    philox::rounds(seed, first + i / philox::kNormalPerBlock, w);
    double z0, z1;
    philox::normal_pair(w, z0, z1);
    out[i] = backend::convert<T>(mean + std * (i % 2 == 0 ? z0 : z1));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) bernoulli_kernel(uint64_t n, T* out, uint64_t seed, uint64_t first, double p) {
  const uint64_t stride = uint64_t(gridDim.x) * kThreads;
  for (uint64_t i = uint64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    uint32_t w[4];
    philox::rounds(seed, first + i / philox::kBernoulliPerBlock, w);
    out[i] = backend::convert<T>(philox::bernoulli(w, static_cast<int>(i % philox::kBernoulliPerBlock), p));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) randint_kernel(uint64_t n, T* out, uint64_t seed, uint64_t first, int64_t low, uint64_t range) {
  const uint64_t stride = uint64_t(gridDim.x) * kThreads;
  for (uint64_t i = uint64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    uint32_t w[4];
    philox::rounds(seed, first + i / 2, w);
    out[i] = backend::convert<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + philox::word64(w, static_cast<int>(i % 2)) % range));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) arange_values_kernel(uint64_t n, T* out, int64_t istart, int64_t istep, double start, double step) {
  const uint64_t stride = uint64_t(gridDim.x) * kThreads;
  for (uint64_t i = uint64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    if constexpr (std::is_integral_v<T>)
      out[i] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(istart) + static_cast<uint64_t>(istep) * i));
    else
      out[i] = backend::convert<T>(start + step * static_cast<double>(i));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) linspace_values_kernel(uint64_t n, T* out, backend::Linspace<T> f) {
  const uint64_t stride = uint64_t(gridDim.x) * kThreads;
  for (uint64_t i = uint64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) out[i] = f(static_cast<int64_t>(i));
}

// Fisher-Yates is sequential: one thread walks the swaps in the CPU's order (the same permutation).
__global__ void randperm_kernel(int64_t n, int64_t* perm, uint64_t seed, uint64_t first) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  uint32_t w[4];
  for (int64_t s = 0; s + 1 < n; ++s) {
    if (s % 2 == 0) philox::rounds(seed, first + static_cast<uint64_t>(s / 2), w);
    const int64_t i = n - 1 - s;
    const int64_t j = static_cast<int64_t>(philox::word64(w, static_cast<int>(s % 2)) % static_cast<uint64_t>(i + 1));
    const int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(uint64_t n, const T* x, bool* mask, T* out, uint64_t seed, uint64_t first, uint64_t threshold, backend::opmath_t<T> scale) {
  const uint64_t stride = uint64_t(gridDim.x) * kThreads;
  for (uint64_t i = uint64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    uint32_t w[4];
    philox::rounds(seed, first + i / philox::kDropoutPerBlock, w);
    const uint32_t kept = static_cast<uint32_t>(philox::dropout_keep(w, static_cast<int>(i % philox::kDropoutPerBlock), threshold));
    mask[i] = kept != 0;
    out[i] = backend::st<T>(backend::om(x[i]) * (static_cast<backend::opmath_t<T>>(kept) * scale));
  }
}

template <typename T>
struct DropoutApplyF {
  backend::opmath_t<T> s;
  DP_HOST_DEVICE DP_INLINE T operator()(T x, bool m) const { return backend::st<T>(backend::om(x) * (static_cast<backend::opmath_t<T>>(m) * s)); }
};

}  // namespace

void dropout_forward_kernel(const Tensor& x, double keep, double scale, uint64_t seed, uint64_t first, const Tensor& mask, const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  DP_CHECK(x.device() == out.device() && mask.device() == out.device() && x.is_contiguous() && mask.is_contiguous() && out.is_contiguous(),
           ValueError, "dropout (CUDA): expected contiguous tensors on one device");
  const uint64_t threshold = philox::dropout_threshold(keep);
  cudaStream_t stream = current_stream(dev).handle();
  backend::dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    dropout_kernel<T><<<detail::grid_for(n, dev), kThreads, 0, stream>>>(static_cast<uint64_t>(n), static_cast<const T*>(x.data_ptr()),
                                                                         static_cast<bool*>(mask.data_ptr()), static_cast<T*>(out.data_ptr()), seed,
                                                                         first, threshold, static_cast<backend::opmath_t<T>>(scale));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void dropout_apply_kernel(const Tensor& x, const Tensor& mask, double scale, const Tensor& out) {
  backend::dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    CudaLaunch::run<T, T, bool>(out, DropoutApplyF<T>{static_cast<backend::opmath_t<T>>(scale)}, x, mask);
  });
}

void random_fill_kernel(RandomKind kind, const Tensor& t, uint64_t seed, uint64_t first, double a, double b) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int dev = t.device().index;
  DeviceGuard guard(dev);
  DP_CHECK(t.is_contiguous(), ValueError, "random_fill: expected a contiguous CUDA tensor");
  cudaStream_t stream = current_stream(dev).handle();
  const unsigned blocks = detail::grid_for(n, dev);
  const uint64_t un = static_cast<uint64_t>(n);
  if (kind == RandomKind::Bernoulli) {
    backend::dispatch_all(t.dtype(), "bernoulli_", [&]<typename T>() {
      bernoulli_kernel<T><<<blocks, kThreads, 0, stream>>>(un, static_cast<T*>(t.data_ptr()), seed, first, a);
    });
  } else {
    backend::dispatch_floating(t.dtype(), kind == RandomKind::Uniform ? "uniform_" : "normal_", [&]<typename T>() {
      if (kind == RandomKind::Uniform)
        uniform_kernel<T><<<blocks, kThreads, 0, stream>>>(un, static_cast<T*>(t.data_ptr()), seed, first, a, b - a);
      else
        normal_kernel<T><<<blocks, kThreads, 0, stream>>>(un, static_cast<T*>(t.data_ptr()), seed, first, a, b);
    });
  }
  DP_CUDA_CHECK(cudaGetLastError());
}

void randint_fill_kernel(const Tensor& t, uint64_t seed, uint64_t first, int64_t low, uint64_t range) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int dev = t.device().index;
  DeviceGuard guard(dev);
  DP_CHECK(t.is_contiguous(), ValueError, "randint (CUDA): expected a contiguous CUDA tensor");
  cudaStream_t stream = current_stream(dev).handle();
  backend::dispatch_all(t.dtype(), "randint", [&]<typename T>() {
    randint_kernel<T>
        <<<detail::grid_for(n, dev), kThreads, 0, stream>>>(static_cast<uint64_t>(n), static_cast<T*>(t.data_ptr()), seed, first, low, range);
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void randperm_fill_kernel(const Tensor& out, uint64_t seed, uint64_t first) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  DP_CHECK(out.is_contiguous() && out.dtype() == kInt64, ValueError, "randperm (CUDA): expected a contiguous int64 CUDA tensor");
  randperm_kernel<<<1, 1, 0, current_stream(dev).handle()>>>(n, static_cast<int64_t*>(out.data_ptr()), seed, first);
  DP_CUDA_CHECK(cudaGetLastError());
}

void arange_kernel(const Tensor& out, const Scalar& start, const Scalar& step) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  DP_CHECK(out.is_contiguous(), ValueError, "arange (CUDA): expected a contiguous CUDA tensor");
  cudaStream_t stream = current_stream(dev).handle();
  backend::dispatch_all(out.dtype(), "arange", [&]<typename T>() {
    const bool integral = std::is_integral_v<T>;
    arange_values_kernel<T><<<detail::grid_for(n, dev), kThreads, 0, stream>>>(static_cast<uint64_t>(n), static_cast<T*>(out.data_ptr()),
                                                                               integral ? start.to_int() : 0, integral ? step.to_int() : 0,
                                                                               integral ? 0.0 : start.to_double(), integral ? 0.0 : step.to_double());
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void linspace_kernel(const Tensor& out, double start, double end) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  DP_CHECK(out.is_contiguous(), ValueError, "linspace (CUDA): expected a contiguous CUDA tensor");
  cudaStream_t stream = current_stream(dev).handle();
  backend::dispatch_all(out.dtype(), "linspace", [&]<typename T>() {
    linspace_values_kernel<T><<<detail::grid_for(n, dev), kThreads, 0, stream>>>(static_cast<uint64_t>(n), static_cast<T*>(out.data_ptr()),
                                                                                 backend::Linspace<T>(start, end, n));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dp::backend::cuda
