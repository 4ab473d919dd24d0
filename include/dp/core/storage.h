#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include "dp/core/allocator.h"
#include "dp/core/device.h"

namespace dp {

// A flat block of device memory shared by a tensor and all its views. The version counter lives
// here because every alias of the memory (views, detach()) must see in-place writes: autograd
// compares it to the version recorded when a tensor was saved for backward.
class StorageImpl {
 public:
  StorageImpl(size_t nbytes, Device device);                       // allocates
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;  // empty: return to the device allocator
  Allocator* allocator_ = nullptr;
  std::atomic<uint32_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace dp
