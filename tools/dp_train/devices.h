#pragma once
// --devices and --output-device.
#include <optional>
#include <string>
#include <vector>
#include "dp/core/device.h"

namespace dp::train {

// "auto": every CUDA device, else every CPU device (cpu:0 .. cpu:N-1, N = dp::cpu_device_count(),
// one per hardware thread unless DP_CPU_DEVICES says otherwise). Otherwise a comma-separated list
// of indexed devices of one type. A device that does not exist, a duplicate or the host "cpu" is a
// DeviceError / ValueError that says what exists.
std::vector<Device> parse_devices(const std::string& spec);

// Empty: the DataParallel default (device_ids[0]). "cpu" is the host.
std::optional<Device> parse_output_device(const std::string& spec);

std::string join(const std::vector<Device>& devices);

}  // namespace dp::train
