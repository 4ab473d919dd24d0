#pragma once
// One sample (or one collated batch) of a dataset: an input and an optional target.
#include <vector>
#include "dp/core/tensor.h"

namespace dp::data {

// `target` is undefined for datasets without labels (RandomDataset). As in libtorch's
// torch::data::Example, a batch is the same pair with a leading batch dimension.
struct Example {
  Tensor data;
  Tensor target;
};

// What a DataLoader yields: `data` is [B, ...sample shape], `target` is [B, ...] or undefined.
using Batch = Example;

// Collates examples by stacking along a new dimension 0 (torch.utils.data.default_collate for
// tensors): every `data` must have one shape and dtype, and every `target` likewise; targets must
// be all defined or all undefined. Errors are ShapeError/DTypeError/ValueError naming the first
// example that disagrees. An empty list is a ValueError (a batch has at least one sample).
Example collate(const std::vector<Example>& examples);

}  // namespace dp::data
