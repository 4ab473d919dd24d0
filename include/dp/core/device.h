#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace dp {

enum class DeviceType : int8_t { CPU, CUDA };

// A place where tensors live and work runs.
//  - "cpu"      the host: work runs in the calling thread (index -1).
//  - "cpu:i"    one of N CPU devices; each owns a worker thread, so replicas on different CPU
//               devices run in parallel (DataParallel on CPU cores).
//  - "cuda:i"   a CUDA device (or a virtual slice of one).
// All CPU devices share host memory, but ops still require their operands on one device, exactly
// as for GPUs, so a forgotten transfer is caught on any machine.
struct Device {
  DeviceType type = DeviceType::CPU;
  int16_t index = -1;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int idx = -1) : type(t), index(static_cast<int16_t>(idx)) {}
  // Parses "cpu", "cpu:3", "cuda", "cuda:1"; throws ValueError naming the bad string.
  Device(const std::string& spec);  // NOLINT(google-explicit-constructor): PyTorch accepts strings
  Device(const char* spec) : Device(std::string(spec)) {}

  static constexpr Device cpu(int idx = -1) { return Device(DeviceType::CPU, idx); }
  static constexpr Device cuda(int idx = 0) { return Device(DeviceType::CUDA, idx); }

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool has_index() const { return index >= 0; }
  std::string str() const;

  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }
};

std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace dp

template <>
struct std::hash<dp::Device> {
  size_t operator()(dp::Device d) const noexcept { return std::hash<int>()((static_cast<int>(d.type) << 16) | static_cast<uint16_t>(d.index)); }
};
