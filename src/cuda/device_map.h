#pragma once
// The logical -> physical CUDA device map behind dp::cuda::device_count() and physical_device()
// (src/cuda/runtime.cpp). Plain C++ with no CUDA dependency, so it is tested on every machine.
//
// DP_CUDA_VIRTUAL_DEVICES=N (a testing and development feature) presents the visible GPUs as N
// logical devices cuda:0 .. cuda:N-1, dealt round-robin over the physical ones: logical i runs on
// physical i % P. With one GPU every logical device is that GPU, so every multi-device code path
// (DataParallel, scatter/gather, gradient reduction) runs on a one-GPU machine. Unset or empty:
// the logical devices are the physical ones.
#include <cstdlib>
#include <string>
#include <vector>
#include "dp/core/errors.h"

namespace dp::cuda::detail {

// Logical device indices stop here (the allocator, the workers and the stream tables are sized so).
inline constexpr int kMaxLogicalDevices = 64;

struct DeviceMap {
  std::vector<int> physical;  // physical[logical]
  bool is_virtual = false;    // DP_CUDA_VIRTUAL_DEVICES was set

  int count() const { return static_cast<int>(physical.size()); }
  // The first logical device on `physical_device`, or -1 if none is.
  int first_logical(int physical_device) const {
    for (int i = 0; i < count(); ++i)
      if (physical[static_cast<size_t>(i)] == physical_device) return i;
    return -1;
  }
};

// Parses the value of DP_CUDA_VIRTUAL_DEVICES (null or empty: unset). ValueError unless it is an
// integer in [1, kMaxLogicalDevices].
inline int parse_virtual_devices(const char* value) {
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  DP_CHECK(end != value && *end == '\0' && n >= 1 && n <= kMaxLogicalDevices, ValueError, "DP_CUDA_VIRTUAL_DEVICES must be an integer in [1, ",
           kMaxLogicalDevices, "] (the number of logical CUDA devices), got '", value, "'");
  return static_cast<int>(n);
}

// The map for `physical_count` visible GPUs and the variable's value. No GPU: no logical device
// either (virtual devices need a GPU to run on), but a malformed value is still an error.
inline DeviceMap make_device_map(const char* env_value, int physical_count) {
  const int wanted = parse_virtual_devices(env_value);
  DeviceMap m;
  m.is_virtual = wanted > 0;
  if (physical_count <= 0) return m;
  const int n = m.is_virtual ? wanted : (physical_count < kMaxLogicalDevices ? physical_count : kMaxLogicalDevices);
  m.physical.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) m.physical.push_back(i % physical_count);
  return m;
}

}  // namespace dp::cuda::detail
