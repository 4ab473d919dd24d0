#pragma once
// The built-in models, as nn::Sequential so that their state_dict keys are those of the same
// torch.nn.Sequential in PyTorch ("1.weight", ...), which --init and --save rely on.
#include <cstdint>
#include <string>
#include <variant>
#include "dp/nn/nn.h"

namespace dp::train {

// "seed" (Linear(5,1), Sigmoid), "mlp" (width `hidden`) or "cnn"; ValueError for another name.
nn::Sequential make_model(const std::string& kind, int64_t hidden);

// The model's criterion: BCELoss for seed (its output is a probability), else cross-entropy.
using Criterion = std::variant<nn::BCELoss, nn::CrossEntropyLoss>;
Criterion make_criterion(const std::string& kind);

// Number of elements over all parameters.
int64_t parameter_count(const nn::Module& model);

}  // namespace dp::train
