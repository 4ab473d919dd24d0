// dp::backends::onednn (dp/core/backends.h), the switches of the CPU backend's oneDNN products:
// declared at the core level so that a program reaches them without the backend's headers.
#include "dp/core/backends.h"
#include "backend/cpu/onednn.h"

namespace dp::backends::onednn {

bool is_available() { return backend::cpu::onednn::implementation()[0] != '\0'; }
void set_enabled(bool on) { backend::cpu::onednn::set_enabled(on); }
bool enabled() { return backend::cpu::onednn::enabled(); }
std::string implementation() { return backend::cpu::onednn::active() ? backend::cpu::onednn::implementation() : ""; }

}  // namespace dp::backends::onednn
