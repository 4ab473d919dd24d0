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
  StorageImpl(size_t nbytes, Device device);  // allocates
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  // An alias of `base`'s memory labelled as another device (DataParallel's zero-copy moves between
  // CPU devices, which all share host memory). It keeps `base` alive and shares its version counter,
  // so an in-place write through either is seen by autograd's saved-tensor checks on both.
  StorageImpl(std::shared_ptr<StorageImpl> base, Device device);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_ptr_->load(std::memory_order_relaxed); }
  void bump_version() { version_ptr_->fetch_add(1, std::memory_order_relaxed); }
  // The storage this one aliases (null for storages that own or wrap memory themselves).
  const std::shared_ptr<StorageImpl>& base() const { return base_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;  // empty: return to the device allocator
  Allocator* allocator_ = nullptr;
  std::atomic<uint32_t> version_{0};
  std::atomic<uint32_t>* version_ptr_ = &version_;  // the base's counter for an alias
  std::shared_ptr<StorageImpl> base_;
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace dp
