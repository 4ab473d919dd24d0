#include "devices.h"

#include <algorithm>
#include <sstream>
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"

namespace dp::train {
namespace {

std::string existing(DeviceType type) {
  const int n = device_count(type);
  if (type == DeviceType::CUDA)
    return n == 0 ? "no CUDA device is visible (this build has no CUDA backend or the machine has no GPU)"
                  : "the CUDA devices are cuda:0 .. cuda:" + std::to_string(n - 1);
  return "the CPU devices are cpu:0 .. cpu:" + std::to_string(n - 1) + " (one per hardware thread; DP_CPU_DEVICES=N sets another count)";
}

Device parse_one(const std::string& item, const std::string& option) {
  Device d;
  try {
    d = Device(item);
  } catch (const Error&) {
    throw ValueError(option + ": '" + item + "' is not a device (write cpu:0, cuda:1, ...)");
  }
  return d;
}

}  // namespace

std::vector<Device> parse_devices(const std::string& spec) {
  if (spec == "auto") {
    std::vector<Device> cuda = devices(DeviceType::CUDA);
    return cuda.empty() ? devices(DeviceType::CPU) : cuda;
  }
  std::vector<Device> out;
  std::stringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    DP_CHECK(!item.empty(), ValueError, "--devices: empty entry in '", spec, "'");
    Device d = parse_one(item, "--devices");
    DP_CHECK(d.has_index(), ValueError, "--devices: '", item, "' is the host; list indexed devices such as cpu:0,cpu:1 (or use auto)");
    DP_CHECK(std::find(out.begin(), out.end(), d) == out.end(), ValueError, "--devices: ", d.str(), " is listed twice");
    DP_CHECK(out.empty() || out[0].type == d.type, ValueError, "--devices: mixes ", out[0].str(), " and ", d.str(), "; list devices of one type");
    DP_CHECK(d.index < device_count(d.type), DeviceError, "--devices: ", d.str(), " does not exist: ", existing(d.type));
    out.push_back(d);
  }
  DP_CHECK(!out.empty(), ValueError, "--devices: no device in '", spec, "'");
  return out;
}

std::optional<Device> parse_output_device(const std::string& spec) {
  if (spec.empty()) return std::nullopt;
  Device d = parse_one(spec, "--output-device");
  if (d.has_index())
    DP_CHECK(d.index < device_count(d.type), DeviceError, "--output-device: ", d.str(), " does not exist: ", existing(d.type));
  else
    DP_CHECK(d.is_cpu(), ValueError, "--output-device: give an index, as in cuda:0");
  return d;
}

std::string join(const std::vector<Device>& devices) {
  std::string s;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (i) s += ',';
    s += devices[i].str();
  }
  return s;
}

}  // namespace dp::train
