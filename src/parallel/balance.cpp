#include "dp/parallel/balance.h"
#include <mutex>
#include "dp/core/warning.h"
#include "dp/core/device_runtime.h"

namespace dp::parallel {
namespace {

std::mutex& provider_mutex() {
  static std::mutex mu;
  return mu;
}
DevicePropertiesProvider& provider() {
  static DevicePropertiesProvider p;
  return p;
}

}  // namespace

std::optional<std::string> imbalance_warning(const std::vector<Device>& devices, const std::vector<DeviceProperties>& properties) {
  if (devices.empty() || devices.size() != properties.size()) return std::nullopt;
  auto check = [&](auto field) -> std::optional<std::string> {
    size_t min_pos = 0, max_pos = 0;
    for (size_t i = 1; i < properties.size(); ++i) {
      if (field(properties[i]) < field(properties[min_pos])) min_pos = i;
      if (field(properties[i]) > field(properties[max_pos])) max_pos = i;
    }
    const double max_val = static_cast<double>(field(properties[max_pos]));
    if (max_val <= 0 || static_cast<double>(field(properties[min_pos])) / max_val >= 0.75) return std::nullopt;
    return "\n    There is an imbalance between your GPUs. You may want to exclude GPU " + std::to_string(devices[min_pos].index) +
           " which\n    has less than 75% of the memory or cores of GPU " + std::to_string(devices[max_pos].index) +
           ". You can do so by setting\n    the device_ids argument to DataParallel, or by setting the CUDA_VISIBLE_DEVICES\n    environment "
           "variable.";
  };
  if (auto w = check([](const DeviceProperties& p) { return p.total_memory; })) return w;
  return check([](const DeviceProperties& p) { return p.multi_processor_count; });
}

DevicePropertiesProvider set_device_properties_provider(DevicePropertiesProvider p) {
  std::lock_guard<std::mutex> lock(provider_mutex());
  DevicePropertiesProvider previous = std::move(provider());
  provider() = std::move(p);
  return previous;
}

std::optional<DeviceProperties> device_properties(Device device) {
  {
    std::lock_guard<std::mutex> lock(provider_mutex());
    if (provider()) return provider()(device);
  }
  // The device's own (a virtual device reports its whole GPU, so virtual devices never look
  // imbalanced). The host's CPU devices share one processor: nothing to compare.
  if (const DeviceRuntime* rt = device_runtime(device.type); rt != nullptr && device.index >= 0 && device.index < rt->device_count())
    return rt->properties(device.index);
  return std::nullopt;
}

void check_balance(const std::vector<Device>& devices) {
  std::vector<DeviceProperties> props;
  for (Device d : devices) {
    if (d.is_cpu()) return;
    auto p = device_properties(d);
    if (!p) return;
    props.push_back(*p);
  }
  if (auto w = imbalance_warning(devices, props)) warn(*w);
}

}  // namespace dp::parallel
