#include "dp/core/device_runtime.h"
#include <array>
#include <atomic>

namespace dp {
namespace {

constexpr size_t kDeviceTypes = static_cast<size_t>(DeviceType::CUDA) + 1;

std::array<std::atomic<const DeviceRuntime*>, kDeviceTypes>& runtimes() {
  static std::array<std::atomic<const DeviceRuntime*>, kDeviceTypes> table{};
  return table;
}

}  // namespace

const DeviceRuntime* device_runtime(DeviceType type) {
  if (type == DeviceType::CPU) return nullptr;
  detail::ensure_backends_registered();
  return runtimes()[static_cast<size_t>(type)].load(std::memory_order_acquire);
}

void register_device_runtime(DeviceType type, const DeviceRuntime* runtime) {
  runtimes()[static_cast<size_t>(type)].store(runtime, std::memory_order_release);
}

std::optional<DeviceType> default_accelerator() {
  for (size_t t = 1; t < kDeviceTypes; ++t) {
    const DeviceRuntime* rt = device_runtime(static_cast<DeviceType>(t));
    if (rt != nullptr && rt->device_count() > 0) return static_cast<DeviceType>(t);
  }
  return std::nullopt;
}

Stream current_stream(Device device) {
  const DeviceRuntime* rt = device_runtime(device.type);
  if (rt == nullptr) return Stream();
  return rt->current_stream(device.has_index() ? device.index : rt->current_device());
}

StreamGuard::StreamGuard(const Stream& stream) {
  if (stream.is_cpu()) return;
  runtime_ = device_runtime(stream.device().type);
  if (runtime_ == nullptr) return;
  const int index = stream.device().index;
  previous_device_ = runtime_->current_device();
  if (index != previous_device_) runtime_->set_device(index);
  previous_ = runtime_->current_stream(index);
  runtime_->set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  if (runtime_ == nullptr) return;
  runtime_->set_current_stream(previous_);
  if (previous_device_ != previous_.device().index) runtime_->restore_device(previous_device_);
}

}  // namespace dp
