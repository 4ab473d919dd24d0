#pragma once
#include <memory>
#include "dp/core/tensor.h"

namespace dp::autograd {

class Node;

// A tensor saved by an op for its backward. Remembers the version counter at save time so that
// an in-place modification before backward is reported (PyTorch's message) instead of giving
// silently wrong gradients. Outputs of the op itself are saved without their history to avoid a
// reference cycle (node -> saved output -> node); unpacked under create_graph they get it back
// (grad_fn = the node that is running, as PyTorch's saved_for), so backward formulas that use an
// op's output (exp, sigmoid, tanh, ...) are differentiable again.
class SavedVariable {
 public:
  SavedVariable() = default;
  SavedVariable(const Tensor& t, bool is_output);
  // Throws AutogradError if the tensor was modified in place since it was saved. `node` is the
  // node the variable was saved for; by default the node the engine is running on this thread.
  Tensor unpack(const Node* node = nullptr) const;
  bool defined() const { return data_.defined(); }
  void reset() { data_ = Tensor(); }

 private:
  Tensor data_;
  uint32_t saved_version_ = 0;
  uint32_t output_nr_ = 0;  // outputs: which output of the node
  bool is_output_ = false;
};

}  // namespace dp::autograd
