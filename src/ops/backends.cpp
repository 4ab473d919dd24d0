#include "dp/ops/backends.h"

#include "backend/cpu/onednn.h"

namespace dp::backends::onednn {

bool is_available() { return kernels::onednn::implementation()[0] != '\0'; }
void set_enabled(bool on) { kernels::onednn::set_enabled(on); }
bool enabled() { return kernels::onednn::enabled(); }
std::string implementation() { return kernels::onednn::active() ? kernels::onednn::implementation() : ""; }

}  // namespace dp::backends::onednn
