#include "dp/core/device.h"
#include <cctype>
#include "dp/core/errors.h"

namespace dp {

Device::Device(const std::string& spec) {
  std::string type_part = spec, index_part;
  auto colon = spec.find(':');
  if (colon != std::string::npos) {
    type_part = spec.substr(0, colon);
    index_part = spec.substr(colon + 1);
    DP_CHECK(!index_part.empty(), ValueError, "Invalid device string: '", spec, "' (expected e.g. \"cpu\", \"cpu:1\", \"cuda:0\")");
    for (char c : index_part)
      DP_CHECK(std::isdigit(static_cast<unsigned char>(c)), ValueError, "Invalid device string: '", spec,
               "': the index must be a non-negative integer");
    // The index is stored in 16 bits: a larger one must not wrap around to the host (-1).
    DP_CHECK(index_part.size() < 6 && std::stoi(index_part) <= 32767, ValueError, "Invalid device string: '", spec,
             "': index too large (at most 32767)");
  }
  if (type_part == "cpu")
    type = DeviceType::CPU;
  else if (type_part == "cuda")
    type = DeviceType::CUDA;
  else
    throw ValueError(detail::str("Invalid device string: '", spec, "' (expected a type of cpu or cuda, e.g. \"cpu:1\", \"cuda:0\")"));
  // "cuda" without index means cuda:0 (the current device); "cpu" without index is the host.
  index = static_cast<int16_t>(index_part.empty() ? (type == DeviceType::CUDA ? 0 : -1) : std::stoi(index_part));
}

std::string Device::str() const {
  std::string s = is_cpu() ? "cpu" : "cuda";
  if (index >= 0) {
    // Two appends, not ":" + to_string(...): GCC 12 at -O3 reports a false -Wrestrict on the
    // temporary that operator+ builds.
    s += ':';
    s += std::to_string(index);
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace dp
