#pragma once
// A device's queue of work as a value any layer can hold without knowing the device type (c10's
// Stream). The CPU has one stream, the default-constructed value: work on it runs at once, on the
// calling thread. A backend names its streams by an id (CUDA: the cudaStream_t handle) and may
// give an owner that keeps a stream the user created alive while any Stream value names it, so a
// graph that recorded the stream can outlive the user's handle.
#include <cstdint>
#include <memory>
#include <utility>
#include "dp/core/device.h"

namespace dp {

class Stream {
 public:
  Stream() = default;
  Stream(Device device, uint64_t id, std::shared_ptr<void> owner = nullptr) : device_(device), id_(id), owner_(std::move(owner)) {}

  Device device() const { return device_; }
  uint64_t id() const { return id_; }
  // True for the host's stream (also what a node off any device records).
  bool is_cpu() const { return device_.is_cpu(); }
  const std::shared_ptr<void>& owner() const { return owner_; }

  friend bool operator==(const Stream& a, const Stream& b) { return a.device_ == b.device_ && a.id_ == b.id_; }
  friend bool operator!=(const Stream& a, const Stream& b) { return !(a == b); }

 private:
  Device device_ = Device::cpu();
  uint64_t id_ = 0;
  std::shared_ptr<void> owner_;
};

}  // namespace dp
