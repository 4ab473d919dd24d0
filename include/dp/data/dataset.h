#pragma once
// The dataset interface (torch.utils.data.Dataset / libtorch's torch::data::datasets::Dataset).
#include <cstddef>
#include <cstdint>
#include <vector>
#include "dp/data/example.h"

namespace dp::data {

// A map-style dataset: `size()` samples addressed by index.
//
// Thread safety: a DataLoader with num_workers > 0 calls get() / get_batch() from several
// background threads at once, so both must be safe to call concurrently (a dataset that only reads
// tensors built in its constructor is). size() is called on the caller's thread only.
class Dataset {
 public:
  virtual ~Dataset() = default;

  // Sample `index`, 0 <= index < size(); an index out of range is an IndexError.
  virtual Example get(size_t index) = 0;
  virtual size_t size() const = 0;

  // The batch made of `indices`, in that order: data [B, ...], target [B, ...] or undefined.
  // Default: get() each index and collate() (stack) the examples. Datasets that hold their
  // samples in one tensor override it with a single gather (TensorDataset uses index_select), so a
  // batch costs one copy instead of B small tensors and a stack.
  virtual Example get_batch(const std::vector<int64_t>& indices);
};

}  // namespace dp::data
