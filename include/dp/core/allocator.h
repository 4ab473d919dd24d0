#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include "dp/core/device.h"

namespace dp {

// Memory statistics of one device's allocator, in bytes (the CUDA caching allocator adds
// "reserved"; for host memory reserved == allocated).
struct MemoryStats {
  int64_t allocated = 0;
  int64_t peak_allocated = 0;
  int64_t reserved = 0;
  int64_t num_allocs = 0;
};

// Hands out device memory. One per device; implementations must be thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Throws OutOfMemory naming the device, the size asked for and what is held.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual Device device() const = 0;
};

// The allocator of a device (host memory, 64-byte aligned, for every CPU device).
Allocator& allocator_for(Device d);
MemoryStats memory_stats(Device d);
void reset_peak_memory_stats(Device d);

}  // namespace dp
