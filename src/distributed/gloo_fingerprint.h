#pragma once
// DP_DISTRIBUTED_DEBUG=1: before each collective the ranks exchange what they are about to run
// (sequence number, operation, dtype and element count of every tensor, root or reduce op) and
// compare, so that ranks that issue different collectives get a CollectiveMismatch naming the
// rank and both descriptions, instead of a hang or silently wrong sums. It costs a small
// allgather per collective: a debugging aid, off by default.
#include <cstdint>
#include <string>
#include <vector>
#include "distributed/gloo_collectives.h"
#include "distributed/gloo_errors.h"
#include "dp/core/tensor.h"

namespace dp::distributed::detail {

// DP_DISTRIBUTED_DEBUG: "1"/"on"/"true"/"detail" enable it, "0"/"off"/"false"/unset do not;
// anything else is a ValueError naming the variable.
bool distributed_debug_enabled();

// "float32[10], int64[3]": dtype and element count of each tensor.
std::string describe_tensors(const std::vector<Tensor>& tensors);

// Exchanges `description` of collective label.sequence with every rank (an allgather on the
// group's own context; its tag has the top bit set, which the collectives' tags never have) and
// throws CollectiveMismatch naming the first rank whose description differs from rank 0's.
void check_same_collective(const GlooCall& call, const OpLabel& label, const std::string& description);

}  // namespace dp::distributed::detail
