#pragma once
// One sample (or one collated batch) of a dataset: an input and an optional target.
#include <vector>
#include "dp/core/tensor.h"

namespace dp::data {

// `target` is undefined for datasets without labels (RandomDataset). As in libtorch's
// torch::data::Example, a batch is the same pair with a leading batch dimension.
//
// `lengths` is for batches of variable-length sequences: the length of each sample's `data` before
// padding, an int64 CPU tensor [B] (what pack_padded_sequence takes), set by a padding collate
// function (PadCollate) and undefined otherwise. `Example{data, target}` and `Example{data}` leave
// the fields they do not name undefined.
struct Example {
  Tensor data;
  Tensor target = {};
  Tensor lengths = {};
};

// What a DataLoader yields: `data` is [B, ...sample shape], `target` is [B, ...] or undefined
// (with a collate_fn: whatever it returns, e.g. PadCollate's [B, L_max, ...] and `lengths`).
using Batch = Example;

// Collates examples by stacking along a new dimension 0 (torch.utils.data.default_collate for
// tensors): every `data` must have one shape and dtype, and every `target` likewise; targets must
// be all defined or all undefined. Errors are ShapeError/DTypeError/ValueError naming the first
// example that disagrees (for samples of different lengths the message suggests a padding
// collate_fn, dp::data::PadCollate). An empty list is a ValueError (a batch has at least one
// sample). `lengths` of the examples is ignored and left undefined in the batch.
Example collate(const std::vector<Example>& examples);

}  // namespace dp::data
