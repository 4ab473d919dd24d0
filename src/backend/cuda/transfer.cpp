// Host <-> device and device <-> device copies, the pinned staging pool, and the launch helpers
// of cuda/launch.cuh that need no device code.
#include "backend/cuda/transfer.h"
#include <cuda_runtime_api.h>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>
#include "dp/core/pooled.h"
#include "dp/core/storage.h"
#include "dp/core/tensor_impl.h"
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"
#include "backend/copy_kernels.h"
#include "backend/cuda/elementwise.h"

namespace dp::backend::cuda {

namespace detail {

int multiprocessor_count(int device) {
  // Read once per device; atomics because replicas launch from several worker threads at once.
  static std::atomic<int> sms[64] = {};
  int s = sms[device & 63].load(std::memory_order_relaxed);
  if (s == 0) {
    int v = 0;
    DP_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, physical_device(device)));
    s = v > 0 ? v : 1;
    sms[device & 63].store(s, std::memory_order_relaxed);
  }
  return s;
}

unsigned grid_for(int64_t n, int device) {
  const int s = multiprocessor_count(device);
  const int64_t want = (n + 255) / 256;
  const int64_t cap = int64_t{s} * 16;  // 16 blocks of 256 threads per SM, grid-stride beyond
  return static_cast<unsigned>(want < cap ? (want > 0 ? want : 1) : cap);
}

Tensor on_device_of(const char* what, const Tensor& out, const Tensor& in) {
  if (in.device() == out.device()) return in;
  DP_CHECK(in.device().is_cpu() && in.numel() == 1, DeviceError, what,
           ": expected all tensors to be on the same device, but found at least two devices, ", out.device().str(), " and ", in.device().str(), "!");
  Tensor d = make_empty(in.sizes(), in.dtype(), out.device());
  copy_across_kernel(d, in, false);
  return d;
}

}  // namespace detail

namespace {

// Pinned staging blocks, reused once the copy that last used them has completed.
// Per device: an event can only be recorded on a stream of the device it was created on.
struct Staging {
  void* ptr;
  size_t bytes;
  cudaEvent_t done;  // recorded after the copy out of the block
  int device;
};
std::mutex staging_mu;
std::vector<Staging>& staging_pool() {
  static auto* p = new std::vector<Staging>();  // outlives static destruction
  return *p;
}

// Bytes of idle staging blocks kept per device: DP_CUDA_PINNED_CACHE_MB (MiB, default 256; 0
// keeps none). Page-locked memory is taken from the host's RAM, so the cache must not grow with
// every new largest copy: beyond the cap, idle blocks whose copy has completed are released.
size_t pinned_cache_cap() {
  static const size_t cap = [] {
    const char* env = std::getenv("DP_CUDA_PINNED_CACHE_MB");
    if (env == nullptr || *env == '\0') return size_t(256) << 20;
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    DP_CHECK(end != env && *end == '\0' && mb >= 0, ValueError, "DP_CUDA_PINNED_CACHE_MB must be a whole number of MiB >= 0, got '", env, "'");
    return static_cast<size_t>(mb) << 20;
  }();
  return cap;
}

// Under staging_mu: takes out of the pool the oldest idle blocks of `device` whose copies have
// completed until the device's cached bytes are within the cap; the caller frees them unlocked
// (cudaFreeHost may wait for the device).
std::vector<Staging> over_cap_locked(int device) {
  auto& pool = staging_pool();
  size_t cached = 0;
  for (const Staging& s : pool)
    if (s.device == device) cached += s.bytes;
  std::vector<Staging> out;
  const size_t cap = pinned_cache_cap();
  for (size_t i = 0; i < pool.size() && cached > cap;) {
    if (pool[i].device != device) {
      ++i;
      continue;
    }
    const cudaError_t q = cudaEventQuery(pool[i].done);
    if (q != cudaSuccess) {
      (void)cudaGetLastError();  // cudaErrorNotReady: still in use
      ++i;
      continue;
    }
    cached -= pool[i].bytes;
    out.push_back(pool[i]);
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return out;
}

void release_staging(const std::vector<Staging>& blocks) {
  for (const Staging& s : blocks) {
    (void)cudaEventDestroy(s.done);
    (void)cudaFreeHost(s.ptr);
  }
}

Staging take_staging(size_t bytes, int device) {
  {
    std::lock_guard<std::mutex> lock(staging_mu);
    auto& pool = staging_pool();
    for (size_t i = 0; i < pool.size(); ++i) {
      if (pool[i].device != device || pool[i].bytes < bytes) continue;
      if (cudaEventQuery(pool[i].done) != cudaSuccess) {
        // cudaErrorNotReady (block still in use) is also the thread's last error: cleared, or the
        // next launch's cudaGetLastError() check would report it as that launch's failure.
        (void)cudaGetLastError();
        continue;
      }
      Staging s = pool[i];
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
      return s;
    }
  }
  Staging s{nullptr, bytes < 4096 ? 4096 : bytes, nullptr, device};
  DeviceGuard guard(device);
  DP_CUDA_CHECK(cudaHostAlloc(&s.ptr, s.bytes, cudaHostAllocDefault));
  DP_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  return s;
}

void give_staging(Staging s) {
  std::vector<Staging> release;
  {
    std::lock_guard<std::mutex> lock(staging_mu);
    staging_pool().push_back(s);
    release = over_cap_locked(s.device);
  }
  release_staging(release);
}

// Copies to or from the host synchronise with it or read host memory when queued, and copies
// between devices order two devices' streams with events: none can be captured into a CUDA graph
// (and a failed call would invalidate the capture), so they are refused with the reason.
void check_not_capturing(const char* what, const Device& dst, const Device& src) {
  for (const Device& d : {dst, src}) {
    if (!d.is_cuda()) continue;
    DP_CHECK(!is_current_stream_capturing(d.index), DeviceError, "copy from ", src.str(), " to ", dst.str(), " (", what,
             ") during CUDA graph capture on ", d.str(),
             ": it cannot be captured (a copy with the host synchronises with it or stages through pinned memory, one "
             "between devices orders two devices' streams); copy into the graph's static input tensors before replay, "
             "outside the capture");
  }
}

// Contiguous host bytes -> contiguous device bytes.
void h2d(void* dst, const void* src, size_t bytes, int dev, bool non_blocking) {
  if (bytes == 0) return;
  cudaStream_t stream = current_stream(dev).handle();
  if (non_blocking && is_pinned(src)) {
    DP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    return;
  }
  Staging s = take_staging(bytes, dev);
  std::memcpy(s.ptr, src, bytes);
  DP_CUDA_CHECK(cudaMemcpyAsync(dst, s.ptr, bytes, cudaMemcpyHostToDevice, stream));
  DP_CUDA_CHECK(cudaEventRecord(s.done, stream));
  give_staging(s);
}

// Contiguous device bytes -> contiguous host bytes.
void d2h(void* dst, const void* src, size_t bytes, int dev, bool non_blocking) {
  if (bytes == 0) return;
  cudaStream_t stream = current_stream(dev).handle();
  DP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  if (!(non_blocking && is_pinned(dst))) DP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

bool is_pinned(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

Tensor empty_pinned(IntArrayRef sizes, DType dtype) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  const size_t bytes = static_cast<size_t>(n) * element_size(dtype);
  void* p = nullptr;
  DP_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault));
  auto storage = ::dp::detail::make_pooled<StorageImpl>(p, bytes, Device::cpu(), [](void* q) { cudaFreeHost(q); });
  Shape sz(sizes.begin(), sizes.end());
  Shape st(sz.size(), 1);
  for (int64_t d = static_cast<int64_t>(sz.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * std::max<int64_t>(sz[d + 1], 1);
  return Tensor(::dp::detail::make_pooled<TensorImpl>(std::move(storage), sz, st, 0, dtype));
}

void copy_across_kernel(const Tensor& dst, const Tensor& src, bool non_blocking) {
  if (dst.numel() == 0) return;
  const Device dd = dst.device(), sd = src.device();
  if (dd.is_cuda() && sd.is_cuda() && dd == sd) {
    copy_on_device(dst, src);
    return;
  }
  if (dd != sd) check_not_capturing(dd.is_cuda() && sd.is_cuda() ? "between devices" : "to or from the host", dd, sd);
  if (dd.is_cuda() && !sd.is_cuda()) {
    // Host -> device: the source made dense in dst's dtype and shape on the host, one transfer,
    // then a device-side layout copy if dst is strided.
    Tensor h = src;
    if (!(h.is_contiguous() && h.dtype() == dst.dtype() && h.sizes() == dst.sizes())) {
      h = make_empty(dst.sizes(), dst.dtype(), Device::cpu());
      backend::copy_kernel(backend::copy_device_type(h, src), h, src);
      non_blocking = false;  // a temporary host buffer is never pinned
    }
    DeviceGuard guard(dd.index);
    Tensor d = dst.is_contiguous() ? dst : make_empty(dst.sizes(), dst.dtype(), dd);
    h2d(d.data_ptr(), h.data_ptr(), h.nbytes(), dd.index, non_blocking);
    if (!d.is_same(dst)) copy_on_device(dst, d);
    return;
  }
  if (!dd.is_cuda() && sd.is_cuda()) {
    // Device -> host: dense in dst's dtype and shape on the device first, one transfer, then a host
    // layout copy if dst is strided.
    DeviceGuard guard(sd.index);
    Tensor s = src;
    if (!(s.is_contiguous() && s.dtype() == dst.dtype() && s.sizes() == dst.sizes())) {
      s = make_empty(dst.sizes(), dst.dtype(), sd);
      copy_on_device(s, src);
    }
    if (dst.is_contiguous()) {
      d2h(dst.data_ptr(), s.data_ptr(), s.nbytes(), sd.index, non_blocking);
    } else {
      Tensor h = make_empty(dst.sizes(), dst.dtype(), Device::cpu());
      d2h(h.data_ptr(), s.data_ptr(), s.nbytes(), sd.index, false);
      backend::copy_kernel(backend::copy_device_type(dst, h), dst, h);
    }
    return;
  }
  // Between two CUDA devices: dense in dst's dtype and shape on the source device, then a peer copy
  // on dst's current stream after the source's current stream has caught up.
  Tensor s = src;
  {
    DeviceGuard guard(sd.index);
    if (!(s.is_contiguous() && s.dtype() == dst.dtype() && s.sizes() == dst.sizes())) {
      s = make_empty(dst.sizes(), dst.dtype(), sd);
      copy_on_device(s, src);
    }
  }
  Event ready;
  ready.record(current_stream(sd.index));
  DeviceGuard guard(dd.index);
  Stream ds = current_stream(dd.index);
  ds.wait(ready);
  Tensor d = dst.is_contiguous() ? dst : make_empty(dst.sizes(), dst.dtype(), dd);
  // Logical devices map to GPUs (virtual devices share one: then a plain device-to-device copy).
  const int dst_gpu = physical_device(dd.index), src_gpu = physical_device(sd.index);
  if (dst_gpu == src_gpu) {
    DP_CUDA_CHECK(cudaMemcpyAsync(d.data_ptr(), s.data_ptr(), s.nbytes(), cudaMemcpyDeviceToDevice, ds.handle()));
  } else {
    enable_peer_access(dd.index, sd.index);
    DP_CUDA_CHECK(cudaMemcpyPeerAsync(d.data_ptr(), dst_gpu, s.data_ptr(), src_gpu, s.nbytes(), ds.handle()));
  }
  // The source block may be freed now: its device's current stream waits for the copy, so its
  // allocator (which reuses blocks in that stream's order) cannot hand it out before the copy is done.
  Event copied;
  copied.record(ds);
  current_stream(sd.index).wait(copied);
  if (!d.is_same(dst)) copy_on_device(dst, d);
}

}  // namespace dp::backend::cuda
