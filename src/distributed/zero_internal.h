#pragma once
// Helpers shared by ZeroRedundancyOptimizer's two source files (zero_redundancy_optimizer.cpp,
// zero_checkpoint.cpp). Private to src/distributed.
#include <cstdint>
#include <string>
#include <utility>
#include "dp/core/errors.h"
#include "dp/optim/optimizer.h"

namespace dp::distributed::zero_detail {

// Runs fn; an Error it throws gets `context` in front of its message (same type, rethrown).
template <typename Fn>
void with_context(const std::string& context, Fn&& fn) {
  try {
    fn();
  } catch (Error& e) {
    e.add_context(context);
    throw;
  }
}

// What the ranks compare to find out whether they hold the same parameter list.
struct Fingerprint {
  uint64_t hash = 0;  // groups, each group's parameter count, each parameter's dtype and shape
  int64_t groups = 0;
  int64_t params = 0;
  int64_t elements = 0;
};
Fingerprint fingerprint(const optim::Optimizer& optimizer);

std::string hex(uint64_t v);

}  // namespace dp::distributed::zero_detail
