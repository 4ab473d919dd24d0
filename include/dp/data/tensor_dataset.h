#pragma once
// A dataset over tensors held in memory (torch.utils.data.TensorDataset with one input and an
// optional target).
#include "dp/data/dataset.h"

namespace dp::data {

// Sample i is (data[i], target[i]): dimension 0 of both tensors indexes samples, so `data` must
// have at least one dimension and, when `target` is defined, target.size(0) == data.size(0)
// (ShapeError naming both shapes otherwise). get() returns views (no copy); get_batch() gathers a
// whole batch with one index_select per tensor.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(Tensor data, Tensor target = {});

  Example get(size_t index) override;
  size_t size() const override;
  Example get_batch(const std::vector<int64_t>& indices) override;

  const Tensor& data() const { return data_; }
  const Tensor& target() const { return target_; }  // may be undefined

 protected:
  TensorDataset() = default;  // for subclasses that load their tensors, then call set_tensors()
  void set_tensors(Tensor data, Tensor target);

 private:
  Tensor data_;
  Tensor target_;
};

}  // namespace dp::data
