#pragma once
// CUDA runtime basics: devices, streams, events, the caching allocator's statistics. Available when
// dparallel is built with the CUDA backend (DP_HAVE_CUDA, see cmake/Cuda.cmake), in its library
// dparallel::cuda (libdparallel_cuda), which a program using this header links besides
// dparallel::dparallel; this header needs no CUDA headers (handles are the CUDA runtime's opaque
// pointer types). dp::cuda::device_count() and is_available() are the core library's.
//
// Devices: device_count() is the number of logical CUDA devices, 0 on any error (no driver, no
// device, a stub libcuda), and is computed once. Normally the logical devices are the visible GPUs.
// The current device is per host thread, as the CUDA runtime's (cudaSetDevice).
//
// Virtual devices (for testing and development): DP_CUDA_VIRTUAL_DEVICES=N presents the visible
// GPUs as N logical devices cuda:0 .. cuda:N-1, logical i on physical GPU i % P, so every
// multi-device path (DataParallel, scatter/gather, gradient reduction) runs on a one-GPU machine.
// Each logical device has its own caching-allocator pool, worker thread and streams; its default
// stream is a created (non-blocking) stream rather than the GPU's legacy default stream, so two
// logical devices' work does not serialise through it. Everything that talks to the CUDA runtime
// with a device id uses physical_device(i). Not for performance: logical devices on one GPU share
// its memory and SMs. A malformed value (not an integer in [1, 64]) is a ValueError from the first
// call that counts devices.
//
// Streams: a Stream is a cheap, copyable handle (device, cudaStream_t); one made by
// Stream::create() owns its cudaStream_t (non-blocking, so it does not synchronise with the
// legacy default stream) and destroys it when the last copy goes. Each host thread has a current
// stream per device, the device's default stream until set_current_stream(); the caching
// allocator allocates on the current stream. A device's default stream is the legacy default
// stream, or with virtual devices one created stream per logical device shared by all threads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include "dp/core/allocator.h"
#include "dp/core/device.h"
#include "dp/core/device_registry.h"
#include "dp/core/stream.h"
#include "dp/cuda/caching_allocator.h"

struct CUstream_st;  // cudaStream_t == CUstream_st*
struct CUevent_st;   // cudaEvent_t == CUevent_st*

namespace dp::cuda {

// device_count() and is_available() are declared in dp/core/device_registry.h (included here):
// they are part of the core library, so that a program without this one may ask.
// Number of visible GPUs (physical devices), whatever DP_CUDA_VIRTUAL_DEVICES says.
int physical_device_count();
// The physical GPU (the CUDA runtime's device id) that logical device `device` runs on.
int physical_device(int device);
// True when DP_CUDA_VIRTUAL_DEVICES is set (logical devices may share a GPU).
bool virtual_devices_enabled();
// The calling thread's current device. Throws DeviceError when no device is available.
int current_device();
// Makes `device` current for the calling thread. Throws DeviceError for an index out of range.
void set_device(int device);
// Waits for all work on `device` (the current one when -1; with virtual devices, on its whole
// GPU). Not for hot paths.
void synchronize(int device = -1);

// Lets kernels and copies on `device` access `peer`'s memory directly (cudaDeviceEnablePeerAccess),
// once per pair. True when they can: the same GPU (virtual devices) or peers; false otherwise, and
// then copies between them are staged by the driver. Never throws for an unsupported pair.
bool enable_peer_access(int device, int peer);

// What DataParallel's imbalance warning compares, read with cudaGetDeviceProperties (a logical
// device reports its whole GPU).
struct DeviceInfo {
  std::string name;
  int64_t total_memory = 0;  // bytes
  int multi_processor_count = 0;
  int major = 0, minor = 0;  // compute capability
};
DeviceInfo device_info(int device);

// Sets the current device for its scope, restores the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

class Event;

class Stream {
 public:
  // The default stream of the current device (see above).
  Stream();
  static Stream default_stream(int device);
  // A new non-blocking stream on `device` (priority: lower is higher, as in CUDA; 0 is normal).
  static Stream create(int device, int priority = 0);

  CUstream_st* handle() const { return handle_; }
  int device() const { return device_; }
  // True for a device's default stream (the legacy one, or a virtual device's own).
  bool is_default() const;
  detail::StreamId id() const { return reinterpret_cast<detail::StreamId>(handle_); }
  // True if all work queued on the stream has completed.
  bool query() const;
  void synchronize() const;
  // Work queued on this stream after this call waits for `event` (no host blocking).
  void wait(const Event& event) const;

  // The same stream as a device-generic dp::Stream (id: the handle; owner: what keeps a created
  // stream alive), and back.
  dp::Stream generic() const;
  static Stream from_generic(const dp::Stream& stream);

  friend bool operator==(const Stream& a, const Stream& b) { return a.handle_ == b.handle_ && a.device_ == b.device_; }
  friend bool operator!=(const Stream& a, const Stream& b) { return !(a == b); }

 private:
  Stream(int device, CUstream_st* handle, std::shared_ptr<CUstream_st> owner) : device_(device), handle_(handle), owner_(std::move(owner)) {}
  int device_;
  CUstream_st* handle_;
  std::shared_ptr<CUstream_st> owner_;  // null for the default stream
};

// The calling thread's current stream on `device` (the current device when -1).
Stream current_stream(int device = -1);
// Makes `stream` the calling thread's current stream on its device.
void set_current_stream(const Stream& stream);

// Sets the current device and that device's current stream for its scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  DeviceGuard device_;
  Stream previous_;
};

// An event, created on first record() (as PyTorch's). Move-only; destroyed with the object.
class Event {
 public:
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void record() { record(current_stream()); }  // on the current device's current stream
  bool recorded() const { return event_ != nullptr; }
  // True once the work before the record() has completed (true if never recorded).
  bool query() const;
  void synchronize() const;
  // Milliseconds from this event to `end`; both recorded with enable_timing, `end` completed.
  float elapsed_ms(const Event& end) const;
  CUevent_st* handle() const { return event_; }
  int device() const { return device_; }

 private:
  bool timing_;
  int device_ = -1;
  CUevent_st* event_ = nullptr;
};

// The caching allocator of `device` as a dp::Allocator (what dp::allocator_for(Device::cuda(i))
// returns; it allocates on the calling thread's current stream), and its core.
Allocator& device_allocator(int device);
detail::CachingAllocatorCore& caching_allocator(int device);
detail::CachingAllocatorStats memory_stats(int device);
// Returns the device's unused cached segments to the driver (cudaFree).
void empty_cache(int device);
// Memory from the device's caching allocator at `ptr` is also used on `stream`: when freed, it is
// reused only after the work queued on `stream` up to the free has completed.
void record_stream(void* ptr, const Stream& stream);

// Fills n 32-bit words at dst (device memory) with `value`, asynchronously on `stream`.
void fill_u32(void* dst, uint32_t value, size_t n, const Stream& stream);

namespace detail {
// device_count() as this library computes it, not through the device registry: for the CUDA
// library's own calls (also while it registers its runtime, which device_count() waits for).
int logical_device_count();
// A kernel that spins for about `cycles` clock cycles on `stream` (as torch.cuda._sleep), for tests
// that need work still running on a stream.
void sleep_cycles(int64_t cycles, const Stream& stream);
}  // namespace detail

}  // namespace dp::cuda
