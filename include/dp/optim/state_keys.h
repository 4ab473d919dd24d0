#pragma once
// The keys of an optimizer's saved per-parameter state: "state.<parameter index>.<field>"
// (Optimizer::state_dict). Shared by the optimizers' own loading and ZeRO's sharded checkpoints.
#include <cstdint>
#include <string>

namespace dp::optim {

// "state.12.exp_avg" -> (12, "exp_avg"); false if the key has another form.
bool parse_state_key(const std::string& key, int64_t& index, std::string& field);

}  // namespace dp::optim
