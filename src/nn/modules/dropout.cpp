#include "dp/nn/modules/dropout.h"

#include "dp/nn/modules/normalization.h"
#include "dp/ops/dropout.h"

namespace dp::nn {

DropoutImpl::DropoutImpl(const DropoutOptions& opts) : options(opts) {
  DP_CHECK(options.p() >= 0.0 && options.p() <= 1.0, ValueError, "Dropout: dropout probability has to be between 0 and 1, but got ",
           detail::python_float_repr(options.p()));
}

Tensor DropoutImpl::forward(const Tensor& input) const {
  if (options.inplace()) {
    Tensor self = input;
    return dropout_(self, options.p(), is_training());
  }
  return dropout(input, options.p(), is_training());
}

std::string DropoutImpl::extra_repr() const {
  return "p=" + detail::python_float_repr(options.p()) + ", inplace=" + (options.inplace() ? "True" : "False");
}

}  // namespace dp::nn
