#include "dp/autograd/saved_variable.h"
#include "dp/autograd/node.h"

namespace dp::autograd {

SavedVariable::SavedVariable(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  saved_version_ = t.version();
  is_output_ = is_output;
  // An op's own output is stored without history: the node holding it is its grad_fn.
  data_ = is_output ? t.detach() : t;
  if (!is_output && t.grad_fn()) producer_ = detail::str("output ", t.output_nr(), " of ", t.grad_fn()->name());
}

Tensor SavedVariable::unpack(const Node* node) const {
  if (!data_.defined()) return Tensor();
  uint32_t now = data_.version();
  if (now != saved_version_) {
    std::string which = is_output_ ? (node ? detail::str(", which is output 0 of ", node->name()) : std::string())
                                   : (producer_.empty() ? std::string() : ", which is " + producer_);
    throw AutogradError(detail::str(
        "one of the variables needed for gradient computation has been modified by an inplace operation: [",
        legacy_type_name(data_.dtype()), " ", data_.size_str(), "]", which, ", is at version ", now, "; expected version ",
        saved_version_, " instead. Hint: the tensor was changed in place after it was used; use an out-of-place op "
        "(x = x.op(...)) or clone() it before the in-place change."));
  }
  return data_;
}

}  // namespace dp::autograd
