#pragma once
// PyTorch's DataParallel imbalance warning: a GPU with under 75% of the memory (or, if memory is
// balanced, of the multiprocessors) of the largest one slows every step down to its pace.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>
#include "dp/core/device.h"
#include "dp/core/device_runtime.h"

namespace dp::parallel {

using DeviceProperties = ::dp::DeviceProperties;  // total_memory (bytes), multi_processor_count

// The warning for `devices` with these properties (aligned), or nullopt when balanced. Memory is
// compared first (min / max < 0.75 warns and stops), then multiprocessors; ties go to the first.
// The text is PyTorch's, naming devices by index.
std::optional<std::string> imbalance_warning(const std::vector<Device>& devices, const std::vector<DeviceProperties>& properties);

// Where DataParallel reads CUDA devices' properties. With no provider installed (the default),
// device_properties() reads the real GPU's (cudaGetDeviceProperties: memory and multiprocessor
// count) when dparallel has the CUDA backend; tests install a table. nullopt: unknown (no check).
// set_device_properties_provider returns the previous provider ({} restores the real one).
using DevicePropertiesProvider = std::function<std::optional<DeviceProperties>(Device)>;
DevicePropertiesProvider set_device_properties_provider(DevicePropertiesProvider provider);
std::optional<DeviceProperties> device_properties(Device device);

// Reads the properties of every device and warns (dp::warn) if they are imbalanced. CUDA devices
// only; does nothing when any device's properties are unknown.
void check_balance(const std::vector<Device>& devices);

}  // namespace dp::parallel
