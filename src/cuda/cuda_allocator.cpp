// The per-device CUDA caching allocator: CachingAllocatorCore over cudaMalloc / cudaFree /
// cudaEvent, behind dp::Allocator (allocator_for(Device::cuda(i)) in src/core/allocator.cpp).
#include <cuda_runtime_api.h>
#include <array>
#include <atomic>
#include <mutex>
#include "dp/core/allocator.h"
#include "dp/core/errors.h"
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"

namespace dp::cuda {
namespace {

class CudaBackend final : public detail::RawMemoryBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    // cudaMalloc is a "potentially unsafe" call during stream capture: in Global or ThreadLocal
    // mode it would invalidate a capture this thread takes part in. A new segment for a graph's
    // private pool is fine (as PyTorch's cudaMallocMaybeCapturing): the graph records its address
    // and the segment is never freed while the graph lives. So the call runs in Relaxed mode.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    DP_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t err = cudaMalloc(&p, bytes);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    DP_CUDA_CHECK(err);
    return p;
  }
  void free(void* ptr, size_t) override {
    DeviceGuard guard(device_);
    DP_CUDA_CHECK(cudaFree(ptr));
  }
  detail::EventId record_event(detail::StreamId stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t e = nullptr;
    DP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    DP_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
    return e;
  }
  bool event_completed(detail::EventId event) override {
    const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    DP_CUDA_CHECK(err);
    return false;
  }
  void synchronize_event(detail::EventId event) override { DP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }
  void destroy_event(detail::EventId event) override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  std::pair<int64_t, int64_t> memory_info() override {
    size_t free_b = 0, total_b = 0;
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) return {-1, -1};
    const int gpu = physical_device(device_);  // device_ is logical (DP_CUDA_VIRTUAL_DEVICES)
    if (previous != gpu && cudaSetDevice(gpu) != cudaSuccess) return {-1, -1};
    const cudaError_t err = cudaMemGetInfo(&free_b, &total_b);
    if (previous != gpu) (void)cudaSetDevice(previous);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return {-1, -1};
    }
    return {static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
  }

 private:
  int device_;
};

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(Device::cuda(device)), backend_(device), core_(device_.str(), backend_) {}
  void* allocate(size_t nbytes) override { return core_.allocate(nbytes, current_stream(device_.index).id()); }
  void deallocate(void* ptr, size_t) override { core_.free(ptr); }
  MemoryStats stats() const override {
    const detail::CachingAllocatorStats s = core_.stats();
    MemoryStats m;
    m.allocated = s.allocated;
    m.peak_allocated = s.peak_allocated;
    m.reserved = s.reserved;
    m.num_allocs = s.num_allocs;
    return m;
  }
  void reset_peak() override { core_.reset_peak(); }
  Device device() const override { return device_; }
  detail::CachingAllocatorCore& core() { return core_; }

 private:
  Device device_;
  CudaBackend backend_;
  detail::CachingAllocatorCore core_;
};

constexpr int kMaxDevices = 64;

CudaCachingAllocator& allocator_of(int device) {
  static std::array<std::atomic<CudaCachingAllocator*>, kMaxDevices> per_device{};
  static std::mutex mu;
  const int n = ::dp::cuda::detail::logical_device_count();
  DP_CHECK(device >= 0 && device < n && device < kMaxDevices, DeviceError, "cuda:", device,
           " does not exist: ", n == 0 ? std::string("no CUDA devices are available") : dp::detail::str("there are ", n, " CUDA devices"));
  if (CudaCachingAllocator* a = per_device[device].load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(mu);
  if (CudaCachingAllocator* a = per_device[device].load(std::memory_order_acquire)) return *a;
  // Never destroyed: tensors may be freed during static destruction, after the runtime is gone.
  auto* a = new CudaCachingAllocator(device);
  per_device[device].store(a, std::memory_order_release);
  return *a;
}

}  // namespace

// Used by dp::allocator_for (src/core/allocator.cpp).
Allocator& device_allocator(int device) { return allocator_of(device); }

detail::CachingAllocatorCore& caching_allocator(int device) { return allocator_of(device).core(); }
detail::CachingAllocatorStats memory_stats(int device) { return caching_allocator(device).stats(); }
void empty_cache(int device) { caching_allocator(device).empty_cache(); }
void record_stream(void* ptr, const Stream& stream) { caching_allocator(stream.device()).record_stream(ptr, stream.id()); }

}  // namespace dp::cuda
