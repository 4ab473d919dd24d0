// The per-device-type capability table (capabilities.h).
#include "backend/capabilities.h"

#include <array>
#include "backend/kernel_stub.h"

namespace dp::backend {
namespace {

std::array<Capabilities, kDeviceTypes>& table() {
  static std::array<Capabilities, kDeviceTypes> t{};
  return t;
}

}  // namespace

const Capabilities& capabilities(DeviceType type) {
  ensure_registered();
  return table()[static_cast<size_t>(type)];
}

void set_capabilities(DeviceType type, const Capabilities& caps) { table()[static_cast<size_t>(type)] = caps; }

}  // namespace dp::backend
