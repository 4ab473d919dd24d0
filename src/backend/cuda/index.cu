// CUDA kernels of the index ops: a gather (index_select, gather, embedding) and an atomic
// scatter-add (index_add, scatter_add, embedding's backward, one_hot), both over an iteration shape
// with an OffsetCalculator, the range check they report through (HostFlag, see index.h), and
// masked_fill.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstring>
#include "backend/dispatch_width.h"
#include "backend/elementwise_impl.h"
#include "backend/cuda/index.h"
#include "backend/cuda/launch.cuh"

namespace dp::backend::cuda {

using detail::CudaLaunch;
using detail::kThreads;
using detail::OffsetCalculator;
using detail::Pointers;

namespace detail {

namespace {
// One flag per host thread, never freed (a few bytes of a pinned page; freeing it at thread exit
// could run after the CUDA runtime is gone). Portable and mapped: any device writes it through
// the pointer cudaHostGetDevicePointer gives.
struct FlagSlot {
  int* host = nullptr;
  int* device = nullptr;
};

FlagSlot& this_thread_slot() {
  thread_local FlagSlot slot;
  if (slot.host == nullptr) {
    void* p = nullptr;
    DP_CUDA_CHECK(cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    void* d = nullptr;
    DP_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    slot.host = static_cast<int*>(p);
    slot.device = static_cast<int*>(d);
  }
  return slot;
}
}  // namespace

HostFlag::HostFlag() {
  FlagSlot& s = this_thread_slot();
  host_ = s.host;
  device_ = s.device;
  *host_ = 0;  // no kernel still writes it: every earlier user waited (raised() or the destructor)
}

HostFlag::~HostFlag() {
  // An exception between the launches and raised(): wait anyway, so that a kernel still queued
  // cannot raise the next op's flag. Errors are ignored (a destructor must not throw).
  if (pending_) (void)cudaStreamSynchronize(stream_);
}

int* HostFlag::device_ptr(CUstream_st* stream) {
  // A stream being captured into a CUDA graph must not wait for the host, and a replay would raise
  // the flag at some later time: no check there (kernels skip bad indices silently, as PyTorch's
  // asserts are the only check inside its graphs). A failed query counts as capturing.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (status != cudaStreamCaptureStatusNone) return nullptr;
  stream_ = stream;
  pending_ = true;
  return device_;
}

bool HostFlag::raised() {
  if (!pending_) return false;
  pending_ = false;
  DP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *host_ != 0;
}

}  // namespace detail

namespace {

// ---- atomic adds for every element type ----

// A byte inside an aligned 32-bit word, by compare-and-swap (no byte atomics in CUDA). Allocations
// are at least 512-byte aligned and sized, so the word is always inside the allocation.
template <typename F>
__device__ void atomic_byte_update(uint8_t* p, F f) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(addr & 3) * 8;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const uint8_t cur = static_cast<uint8_t>((assumed >> shift) & 0xffu);
    const unsigned int next = (assumed & ~(0xffu << shift)) | (static_cast<unsigned int>(f(cur)) << shift);
    old = atomicCAS(word, assumed, next);
  } while (old != assumed);
}

template <typename T>
__device__ DP_INLINE void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    atomicAdd(p, v);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    atomicAdd(reinterpret_cast<int*>(p), static_cast<int>(v));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    // Two's complement: an unsigned add wraps exactly as the CPU's (which adds through uint64).
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, Half>) {
    atomicAdd(reinterpret_cast<__half*>(p), __ushort_as_half(v.x));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __ushort_as_bfloat16(v.x));
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v) atomic_byte_update(reinterpret_cast<uint8_t*>(p), [](uint8_t) { return uint8_t{1}; });  // add is OR
  } else {
    static_assert(std::is_same_v<T, uint8_t>, "atomic_add: unhandled element type");
    atomic_byte_update(reinterpret_cast<uint8_t*>(p), [v](uint8_t c) { return static_cast<uint8_t>(c + v); });
  }
}

// ---- kernels ----

// Operands: 0 the output (or self), 1 the source, 2 the index; offsets in bytes. step in bytes.
template <typename W, typename I>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(uint32_t n, Pointers<3> p, OffsetCalculator<3, uint32_t> oc, int64_t step, int64_t bound, int* bad) {
  const uint32_t stride = gridDim.x * kThreads;
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
    const auto o = oc.get(i);
    const int64_t v = static_cast<int64_t>(*reinterpret_cast<const I*>(p.p[2] + o.v[2]));
    W* dst = reinterpret_cast<W*>(p.p[0] + o.v[0]);
    if (v < 0 || v >= bound) {
      if (bad != nullptr) *reinterpret_cast<volatile int*>(bad) = 1;
      *dst = W(0);
      continue;
    }
    *dst = *reinterpret_cast<const W*>(p.p[1] + o.v[1] + v * step);
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads)
    scatter_add_kernel(uint32_t n, Pointers<3> p, OffsetCalculator<3, uint32_t> oc, int64_t step, int64_t bound, int64_t skip, int* bad) {
  const uint32_t stride = gridDim.x * kThreads;
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
    const auto o = oc.get(i);
    const int64_t v = static_cast<int64_t>(*reinterpret_cast<const I*>(p.p[2] + o.v[2]));
    if (v < 0 || v >= bound) {
      if (bad != nullptr) *reinterpret_cast<volatile int*>(bad) = 1;
      continue;
    }
    if (v == skip) continue;
    atomic_add(reinterpret_cast<T*>(p.p[0] + o.v[0] + v * step), *reinterpret_cast<const T*>(p.p[1] + o.v[1]));
  }
}

template <typename I>
__global__ void __launch_bounds__(kThreads) range_kernel(uint32_t n, const I* index, int64_t bound, int* bad) {
  const uint32_t stride = gridDim.x * kThreads;
  bool any = false;
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
    const int64_t v = static_cast<int64_t>(index[i]);
    any = any || v < 0 || v >= bound;
  }
  if (__syncthreads_or(any) && threadIdx.x == 0 && bad != nullptr) *reinterpret_cast<volatile int*>(bad) = 1;
}

template <typename B>
struct MaskedFillF {
  B v;
  DP_HOST_DEVICE DP_INLINE B operator()(B x, bool m) const { return m ? v : x; }
};

// ---- launch helpers ----

void check_size(const char* op, int64_t n) {
  // The kernels use 32-bit element indices (byte offsets are 64-bit).
  DP_CHECK(n <= INT32_MAX, NotImplementedError, op, ": CUDA index kernels take at most 2^31 - 1 elements per call, got ", n);
}

struct Launch {
  int dev;
  cudaStream_t stream;
  unsigned blocks;
  Pointers<3> p;
  OffsetCalculator<3, uint32_t> oc;
};

Launch prepare(const char* op, const Tensor& iter, const Tensor& src, const Tensor& index) {
  check_size(op, iter.numel());
  Launch l;
  l.dev = iter.device().index;
  l.stream = current_stream(l.dev).handle();
  l.blocks = detail::grid_for(iter.numel(), l.dev);
  l.p = Pointers<3>{{static_cast<char*>(iter.data_ptr()), static_cast<char*>(src.data_ptr()), static_cast<char*>(index.data_ptr())}};
  const Tensor* ops[3] = {&iter, &src, &index};
  l.oc = detail::offsets_for<3, uint32_t>(iter, ops);
  return l;
}

}  // namespace

bool index_gather(const Tensor& out, const Tensor& src, const Tensor& index, int64_t step, int64_t bound, bool check) {
  if (out.numel() == 0) return false;
  DeviceGuard guard(out.device().index);
  const Launch l = prepare("gather", out, src, index);
  detail::HostFlag flag;
  int* bad = check ? flag.device_ptr(l.stream) : nullptr;
  const int64_t step_bytes = step * static_cast<int64_t>(src.element_size());
  ::dp::backend::dispatch_width(out.element_size(), [&]<typename W>() {
    backend::dispatch_index(index.dtype(), "gather", [&]<typename I>() {
      gather_kernel<W, I><<<l.blocks, kThreads, 0, l.stream>>>(static_cast<uint32_t>(out.numel()), l.p, l.oc, step_bytes, bound, bad);
    });
  });
  DP_CUDA_CHECK(cudaGetLastError());
  return flag.raised();
}

bool index_scatter_add(const Tensor& self, const Tensor& src, const Tensor& index, int64_t step, int64_t bound, int64_t skip, bool check) {
  if (self.numel() == 0) return false;
  DeviceGuard guard(self.device().index);
  const Launch l = prepare("scatter_add", self, src, index);
  detail::HostFlag flag;
  int* bad = check ? flag.device_ptr(l.stream) : nullptr;
  const int64_t step_bytes = step * static_cast<int64_t>(self.element_size());
  backend::dispatch_all(self.dtype(), "scatter_add", [&]<typename T>() {
    backend::dispatch_index(index.dtype(), "scatter_add", [&]<typename I>() {
      scatter_add_kernel<T, I><<<l.blocks, kThreads, 0, l.stream>>>(static_cast<uint32_t>(self.numel()), l.p, l.oc, step_bytes, bound, skip, bad);
    });
  });
  DP_CUDA_CHECK(cudaGetLastError());
  return flag.raised();
}

bool index_out_of_range(const Tensor& index, int64_t bound) {
  const int64_t n = index.numel();
  if (n == 0) return false;
  check_size("index check", n);
  const int dev = index.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev).handle();
  detail::HostFlag flag;
  int* bad = flag.device_ptr(stream);
  backend::dispatch_index(index.dtype(), "index check", [&]<typename I>() {
    range_kernel<I><<<detail::grid_for(n, dev), kThreads, 0, stream>>>(static_cast<uint32_t>(n), static_cast<const I*>(index.data_ptr()), bound, bad);
  });
  DP_CUDA_CHECK(cudaGetLastError());
  return flag.raised();
}

void masked_fill_kernel(const Tensor& out, const Tensor& a, const Tensor& mask, const Scalar& value) {
  uint64_t bits = 0;
  backend::dispatch_all(out.dtype(), "masked_fill", [&]<typename T>() {
    const T v = backend::scalar_to<T>(value);
    std::memcpy(&bits, &v, sizeof(T));
  });
  ::dp::backend::dispatch_width(out.element_size(),
                                [&]<typename B>() { CudaLaunch::run<B, B, bool>(out, MaskedFillF<B>{static_cast<B>(bits)}, a, mask); });
}

}  // namespace dp::backend::cuda
