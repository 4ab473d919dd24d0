#include "dp/autograd/saved_variable.h"
#include "dp/autograd/grad_mode.h"
#include "dp/autograd/node.h"

namespace dp::autograd {

SavedVariable::SavedVariable(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  saved_version_ = t.version();
  is_output_ = is_output;
  // An op's own output is stored without history: the node holding it is its grad_fn. Ops may
  // save it before or after record(); after, its output_nr is known.
  if (is_output) {
    output_nr_ = t.grad_fn() ? t.output_nr() : 0;
    data_ = t.detach();
  } else {
    data_ = t;
  }
}

Tensor SavedVariable::unpack(const Node* node) const {
  if (!data_.defined()) return Tensor();
  if (!node) node = current_node();
  const uint32_t now = data_.version();
  if (now < saved_version_) [[unlikely]] {
    // In-place ops only raise a storage's version: a lower one means the tensor was given other
    // storage (Tensor::set_data, as Module::to moves parameters) after it was saved. The data the
    // graph was built with is gone; PyTorch keeps it only where the op saved a view of the tensor.
    throw AutogradError(detail::str("a tensor needed for gradient computation was given new data after it was saved: [",
                                    legacy_type_name(data_.dtype()), " ", data_.size_str(), "] on ", data_.device().str(),
                                    " (Tensor::set_data; Module::to moves parameters this way). Backward through a graph built before the move "
                                    "cannot use it; run the forward pass again after moving the module."));
  }
  if (now != saved_version_) {
    // PyTorch names the tensor's producer: for an input its current grad_fn (after an in-place op
    // that is the in-place op's node), for an output the node it was saved for.
    std::string which;
    if (is_output_) {
      if (node) which = detail::str(", which is output ", output_nr_, " of ", node->name(), ",");
    } else if (const auto& fn = data_.grad_fn()) {
      which = detail::str(", which is output ", data_.output_nr(), " of ", fn->name(), ",");
    }
    throw AutogradError(detail::str("one of the variables needed for gradient computation has been modified by an inplace operation: [",
                                    legacy_type_name(data_.dtype()), " ", data_.size_str(), "]", which, " is at version ", now, "; expected version ",
                                    saved_version_,
                                    " instead. Hint: the tensor was changed in place after it was used; use an out-of-place op "
                                    "(x = x.op(...)) or clone() it before the in-place change."));
  }
  if (is_output_ && node && GradMode::is_enabled()) {
    // Double backward: the saved output is a function of the node's inputs. Give the alias the
    // node as grad_fn (sharing storage and version counter), as PyTorch does.
    Tensor out = data_.detach();
    AutogradMeta& meta = out.unsafe_impl()->autograd_meta();
    meta.grad_fn = const_cast<Node*>(node)->shared_from_this();
    meta.output_nr = output_nr_;
    return out;
  }
  return data_;
}

}  // namespace dp::autograd
