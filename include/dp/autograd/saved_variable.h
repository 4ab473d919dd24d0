#pragma once
#include <memory>
#include "dp/core/tensor.h"

namespace dp::autograd {

class Node;

// A tensor saved by an op for its backward. Remembers the version counter at save time so that
// an in-place modification before backward is reported (PyTorch's message) instead of giving
// silently wrong gradients. Outputs of the op itself are saved without their history to avoid a
// reference cycle (node -> saved output -> node).
class SavedVariable {
 public:
  SavedVariable() = default;
  SavedVariable(const Tensor& t, bool is_output);
  // Throws AutogradError if the tensor was modified in place since it was saved. `node` names the
  // backward function in the message.
  Tensor unpack(const Node* node = nullptr) const;
  bool defined() const { return data_.defined(); }
  void reset() { data_ = Tensor(); }

 private:
  Tensor data_;
  uint32_t saved_version_ = 0;
  bool is_output_ = false;
  std::string producer_;  // "output 0 of ExpBackward0" when known
};

}  // namespace dp::autograd
