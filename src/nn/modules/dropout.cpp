#include "dp/nn/modules/dropout.h"

#include "dp/nn/modules/normalization.h"
#include "dp/autograd/function.h"
#include "dp/ops/dropout.h"
#include "dp/ops/factory.h"

namespace dp::nn {

namespace {
void check_p(const char* module, double p) {
  DP_CHECK(p >= 0.0 && p <= 1.0, ValueError, module, ": dropout probability has to be between 0 and 1, but got ", detail::python_float_repr(p));
}
std::string repr_of(const DropoutOptions& o) { return "p=" + detail::python_float_repr(o.p()) + ", inplace=" + (o.inplace() ? "True" : "False"); }
}  // namespace

DropoutImpl::DropoutImpl(const DropoutOptions& opts) : options(opts) { check_p("Dropout", options.p()); }

Tensor DropoutImpl::forward(const Tensor& input) const {
  if (options.inplace()) {
    Tensor self = input;
    return dropout_(self, options.p(), is_training());
  }
  return dropout(input, options.p(), is_training());
}

std::string DropoutImpl::extra_repr() const { return repr_of(options); }

// ---------------------------------------------------------------- Dropout2d

Dropout2dImpl::Dropout2dImpl(const Dropout2dOptions& opts) : options(opts) { check_p("Dropout2d", options.p()); }

Tensor Dropout2dImpl::forward(const Tensor& input) const {
  DP_CHECK(input.defined(), ValueError, "Dropout2d: the input is undefined");
  DP_CHECK(input.dim() == 3 || input.dim() == 4, ShapeError, "Dropout2d: expected a 4-D input [N, C, H, W] or a 3-D input [C, H, W], got ",
           input.dim(), "-D input of shape ", input.size_str());
  if (input.dim() == 4) {
    if (!options.inplace()) return feature_dropout(input, options.p(), is_training());
    Tensor self = input;
    return feature_dropout_(self, options.p(), is_training());
  }
  // [C, H, W]: one draw per channel, as for a batch of one.
  if (!options.inplace()) {
    Tensor batched = input.unsqueeze(0);
    Tensor out = feature_dropout(batched, options.p(), is_training());
    return out.is_same(batched) ? input : out.squeeze(0);
  }
  // In place: the noise [C, 1, 1] applied to the input itself (not through a view of it).
  Tensor self = input;
  if (!is_training() || options.p() == 0.0 || input.numel() == 0) return self;
  DP_CHECK(input.is_floating_point(), DTypeError, "Dropout2d: expected a floating point input, got ", input.describe());
  autograd::check_inplace(self, "Dropout2d");
  const double p = options.p();
  Tensor noise = zeros({input.size(0), 1, 1}, options_of(input));
  if (p < 1.0) {
    bernoulli_(noise, 1.0 - p);
    noise.div_(1.0 - p);
  }
  return self.mul_(noise);
}

std::string Dropout2dImpl::extra_repr() const { return repr_of(options); }

// ---------------------------------------------------------------- FeatureDropout

FeatureDropoutImpl::FeatureDropoutImpl(const FeatureDropoutOptions& opts) : options(opts) { check_p("FeatureDropout", options.p()); }

Tensor FeatureDropoutImpl::forward(const Tensor& input) const {
  if (!options.inplace()) return feature_dropout(input, options.p(), is_training());
  Tensor self = input;
  return feature_dropout_(self, options.p(), is_training());
}

std::string FeatureDropoutImpl::extra_repr() const { return repr_of(options); }

}  // namespace dp::nn
