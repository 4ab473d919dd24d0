#pragma once
// What the layers above core need from a device type that has its own memory and queues (c10's
// DeviceGuardImplInterface): how many devices it has, the calling thread's current device and
// stream, ordering between streams, and its allocator. A backend registers one runtime for its
// device type when the kernels are registered; the host (DeviceType::CPU) has none, and every
// generic helper below treats it as "nothing to do": the CPU's stream is the calling thread.
//
// Autograd (each node's creation stream, gradients crossing streams), parallel_apply (each replica
// runs with the caller's stream of its device current) and the allocator lookup go through this
// interface, so none of them names a device type.
#include <cstddef>
#include <cstdint>
#include <optional>
#include "dp/core/device.h"
#include "dp/core/stream.h"

namespace dp {

class Allocator;

// What DataParallel's balance check compares (PyTorch's total_memory and multi_processor_count).
struct DeviceProperties {
  int64_t total_memory = 0;  // bytes
  int64_t multi_processor_count = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // Devices visible (0 without a driver or a device).
  virtual int device_count() const = 0;
  // The calling thread's current device index, and setting it.
  virtual int current_device() const = 0;
  virtual void set_device(int index) const = 0;
  // set_device for destructors: never throws, ignores an index out of range.
  virtual void restore_device(int index) const noexcept = 0;

  virtual Stream current_stream(int index) const = 0;
  virtual Stream default_stream(int index) const = 0;
  // Makes `stream` the calling thread's current stream on its device.
  virtual void set_current_stream(const Stream& stream) const = 0;
  // Work queued on `waiter` after this call waits for the work queued on `producer` so far (an
  // event: the host does not block).
  virtual void wait_stream(const Stream& waiter, const Stream& producer) const = 0;
  // The memory at ptr is also read on `stream`: if it came from this runtime's caching allocator,
  // the block is reused only after that use (memory from elsewhere is its owner's concern).
  virtual void record_stream(void* ptr, const Stream& stream) const = 0;

  virtual Allocator& allocator(int index) const = 0;
  virtual DeviceProperties properties(int index) const = 0;
};

// The runtime registered for `type`; nullptr for the host and for a device type this build has no
// backend for.
const DeviceRuntime* device_runtime(DeviceType type);
// Called once per device type by a backend's registration (src/backend/registry.cpp).
void register_device_runtime(DeviceType type, const DeviceRuntime* runtime);

// The first device type after the host whose runtime has devices (DataParallel's default), if any.
std::optional<DeviceType> default_accelerator();

// The calling thread's current stream of `device` (the host's Stream for a host device).
Stream current_stream(Device device);

// Sets the current device and that device's current stream for its scope (a no-op for the host's
// stream); restores both.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  const DeviceRuntime* runtime_ = nullptr;
  int previous_device_ = -1;
  Stream previous_;
};

namespace detail {
// Defined by the backend layer (src/backend/registry.cpp): registers every backend's kernels and
// device runtimes, once. Declared here so core can make sure of it before its first lookup.
void ensure_backends_registered();
}  // namespace detail

}  // namespace dp
