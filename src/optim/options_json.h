#pragma once
// Hyper-parameters <-> JSON (the "param_groups" metadata of a state dict), and the field-by-field
// inheritance of unset options from an optimizer's defaults. Private to src/optim.
#include <nlohmann/json.hpp>
#include <string>
#include "dp/optim/optimizer.h"

namespace dp::optim::detail {

// {"lr": 0.1, "momentum": 0.9, ...}; betas as a two-element list, as in PyTorch.
nlohmann::json options_to_json(const OptimizerOptions& options);
// Sets the fields present in j (all marked as set). A field of the wrong JSON type is a ValueError
// naming `context` and the field; fields j lacks are left as they are; unknown keys are ignored
// ("params" sits beside the options in a param group).
void options_from_json(OptimizerOptions& options, const nlohmann::json& j, const std::string& context);
// Copies into `options` every field it has not set explicitly from `defaults`; both must be of
// the same class, else a ValueError naming `optimizer` ("SGD").
void inherit_unset(OptimizerOptions& options, const OptimizerOptions& defaults, const char* optimizer);

// A JSON value in a message: scalars as JSON (strings clipped), lists and objects by kind and size,
// so a message never holds an unbounded piece of a file (nor prints a deeply nested value, which
// recurses).
std::string brief(const nlohmann::json& j);
// json::parse of metadata read from a file: nesting deeper than 64 levels and every parser error
// (numbers overflowing a double included) are a ValueError naming `context`.
nlohmann::json parse_json(const std::string& text, const std::string& context);

}  // namespace dp::optim::detail
