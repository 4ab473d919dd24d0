#pragma once
// Device lists for multi-device tests.
#include <vector>
#include "dp/core/device.h"

namespace dp::test {

// cpu:0 ... cpu:n-1 (the test must have made that many CPU devices: set_cpu_device_count).
inline std::vector<Device> cpu_devices(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device::cpu(i));
  return d;
}

}  // namespace dp::test
