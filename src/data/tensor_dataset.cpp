#include "dp/data/tensor_dataset.h"

#include "dp/ops/factory.h"
#include "dp/ops/index.h"

namespace dp::data {

TensorDataset::TensorDataset(Tensor data, Tensor target) { set_tensors(std::move(data), std::move(target)); }

void TensorDataset::set_tensors(Tensor data, Tensor target) {
  DP_CHECK(data.defined(), ValueError, "TensorDataset: data is undefined");
  DP_CHECK(data.dim() >= 1, ShapeError, "TensorDataset: data must have a sample dimension (dim 0), got a 0-d tensor");
  if (target.defined()) {
    DP_CHECK(target.dim() >= 1, ShapeError, "TensorDataset: target must have a sample dimension (dim 0), got a 0-d tensor");
    DP_CHECK(target.size(0) == data.size(0), ShapeError, "TensorDataset: data has ", data.size(0), " samples (shape ", data.size_str(),
             ") but target has ", target.size(0), " (shape ", target.size_str(), ")");
  }
  data_ = std::move(data);
  target_ = std::move(target);
}

size_t TensorDataset::size() const { return data_.defined() ? static_cast<size_t>(data_.size(0)) : 0; }

Example TensorDataset::get(size_t index) {
  DP_CHECK(index < size(), IndexError, "TensorDataset::get: index ", index, " is out of range for a dataset of size ", size());
  const auto i = static_cast<int64_t>(index);
  return Example{data_.select(0, i), target_.defined() ? target_.select(0, i) : Tensor()};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) {
  DP_CHECK(!indices.empty(), ValueError, "TensorDataset::get_batch: cannot make a batch of 0 samples");
  const int64_t n = static_cast<int64_t>(size());
  for (int64_t i : indices)
    DP_CHECK(i >= 0 && i < n, IndexError, "TensorDataset::get_batch: index ", i, " is out of range for a dataset of size ", n);
  // One gather per tensor: the batch is a single contiguous copy.
  Tensor idx = from_blob_copy(indices.data(), {static_cast<int64_t>(indices.size())}, kInt64);
  return Example{index_select(data_, 0, idx), target_.defined() ? index_select(target_, 0, idx) : Tensor()};
}

}  // namespace dp::data
