// The slot autograd fills with its implementation of core/autograd_hooks.h.
#include "core/autograd_hooks.h"

#include <atomic>
#include "dp/core/errors.h"

namespace dp::detail {
namespace {
std::atomic<const AutogradHooks*> installed{nullptr};
}  // namespace

void set_autograd_hooks(const AutogradHooks* hooks) { installed.store(hooks, std::memory_order_release); }

const AutogradHooks& autograd_hooks() {
  const AutogradHooks* h = installed.load(std::memory_order_acquire);
  DP_CHECK(h != nullptr, AutogradError, "autograd is not linked into this program (no autograd graph was ever built)");
  return *h;
}

}  // namespace dp::detail
