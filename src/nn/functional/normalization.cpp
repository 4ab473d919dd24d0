// dp::nn::functional batch_norm and layer_norm (forwarders) and normalize (written with dp ops).
#include <cmath>
#include "dp/nn/functional/normalization.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/normalization.h"
#include "dp/ops/reduction.h"

namespace dp::nn::functional {

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const BatchNormFuncOptions& o) {
  return dp::batch_norm(input, running_mean, running_var, o.weight(), o.bias(), o.training(), o.momentum(), o.eps());
}

Tensor layer_norm(const Tensor& input, const LayerNormFuncOptions& o) {
  return dp::layer_norm(input, o.normalized_shape(), o.weight(), o.bias(), o.eps());
}

Tensor normalize(const Tensor& input, const NormalizeFuncOptions& o) {
  DP_CHECK(input.defined(), ValueError, "normalize: the input is an undefined tensor");
  DP_CHECK(input.is_floating_point(), DTypeError, "normalize: expected a floating point input, got ", dtype_name(input.dtype()), " ",
           input.size_str());
  const double p = o.p();
  DP_CHECK(p > 0, ValueError, "normalize: p must be positive, got ", p);
  const int64_t dim = wrap_dim(o.dim(), input.dim(), "normalize");
  // max(||x||, eps) is computed as root(max(sum |x|^p, eps^p)): the same value (the root is
  // increasing), and below eps the clamp passes no gradient into the root, so a zero vector gets
  // the finite gradient 1 / eps (PyTorch's) instead of 0 * inf = NaN from the root's derivative at 0.
  Tensor denom;
  if (std::isinf(p)) {
    denom = dp::clamp_min(dp::amax(dp::abs(input), dim, true), o.eps());
  } else if (p == 2.0) {
    denom = dp::sqrt(dp::clamp_min(dp::sum(dp::square(input), dim, true), o.eps() * o.eps()));
  } else if (p == 1.0) {
    denom = dp::clamp_min(dp::sum(dp::abs(input), dim, true), o.eps());
  } else {
    denom = dp::pow(dp::clamp_min(dp::sum(dp::pow(dp::abs(input), p), dim, true), std::pow(o.eps(), p)), 1.0 / p);
  }
  return input / denom;
}

}  // namespace dp::nn::functional
