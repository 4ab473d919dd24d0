#pragma once
// The --devices option shared by the DataParallel examples: a comma-separated device list such as
// "cpu:0,cpu:1" or "cuda:0,cuda:1". The default is what torch.nn.DataParallel uses (every CUDA
// device) and, on a machine without one, two CPU devices so that the examples still split batches.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>
#include "dp/dp.h"

namespace dp_examples {

inline const char* kDevicesHelp =
    "--devices LIST   comma-separated devices, e.g. cpu:0,cpu:1 or cuda:0,cuda:1\n"
    "                 (default: every CUDA device if there is one, else cpu:0,cpu:1)\n";

// The default device list (see above).
inline std::vector<dp::Device> default_devices() {
  std::vector<dp::Device> cuda = dp::devices(dp::DeviceType::CUDA);
  if (!cuda.empty()) return cuda;
  return {dp::Device::cpu(0), dp::Device::cpu(1)};
}

// Parses "cpu:0,cpu:1". CPU devices past the configured count (DP_CPU_DEVICES, else the number of
// hardware threads) are made to exist, so "cpu:0,...,cpu:3" works on a 2-core machine too (the
// replicas then share cores). Must run before any CPU device's worker starts.
inline std::vector<dp::Device> parse_devices(const std::string& list) {
  std::vector<dp::Device> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    dp::Device d(item);
    DP_CHECK(d.has_index(), ValueError, "--devices: '", item,
             "' is the host; list indexed devices such as cpu:0 or cuda:0");
    out.push_back(d);
  }
  DP_CHECK(!out.empty(), ValueError, "--devices: no device in '", list, "'");
  int needed = 0;
  for (dp::Device d : out)
    if (d.is_cpu()) needed = std::max(needed, d.index + 1);
  if (needed > dp::cpu_device_count()) dp::set_cpu_device_count(needed);
  for (dp::Device d : out) dp::check_device(d);
  return out;
}

inline std::string join(const std::vector<dp::Device>& devices) {
  std::string s;
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + devices[i].str();
  return s;
}

}  // namespace dp_examples
