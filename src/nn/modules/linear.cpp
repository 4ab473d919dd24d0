#include "dp/nn/modules/linear.h"

#include <cmath>
#include "dp/nn/init.h"
#include "dp/ops/factory.h"
#include "dp/ops/linalg.h"

namespace dp::nn {

LinearImpl::LinearImpl(const LinearOptions& opts) : options(opts) {
  DP_CHECK(options.in_features() >= 0 && options.out_features() >= 0, ValueError, "Linear: in_features and out_features must be non-negative, got ",
           options.in_features(), " and ", options.out_features());
  weight = register_parameter("weight", empty({options.out_features(), options.in_features()}));
  bias = register_parameter("bias", options.bias() ? empty({options.out_features()}) : Tensor());
  bind_tensor<&LinearImpl::weight>("weight");
  bind_tensor<&LinearImpl::bias>("bias");
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  // PyTorch: kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(in), 1/sqrt(in)); bias the same bound.
  if (options.in_features() > 0) {
    init::kaiming_uniform_(weight, std::sqrt(5.0));
  } else {
    init::zeros_(weight);
  }
  if (bias.defined()) {
    double bound = options.in_features() > 0 ? 1.0 / std::sqrt(static_cast<double>(options.in_features())) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& input) const {
  DP_CHECK(input.dim() >= 1 && input.size(-1) == options.in_features(), ShapeError, "Linear: mat1 and mat2 shapes cannot be multiplied (input ",
           input.size_str(), ", weight [", options.out_features(), ", ", options.in_features(), "]): the last input dimension must be ",
           options.in_features());
  return linear(input, weight, bias);
}

std::string LinearImpl::extra_repr() const {
  return "in_features=" + std::to_string(options.in_features()) + ", out_features=" + std::to_string(options.out_features()) +
         ", bias=" + (options.bias() ? "True" : "False");
}

}  // namespace dp::nn
