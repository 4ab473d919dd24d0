// torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (1.13), op for op, so the total norm and the
// scaled gradients round as PyTorch's do.
#include "dp/nn/utils/clip_grad.h"
#include <cmath>
#include "dp/autograd/grad_mode.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"

namespace dp::nn::utils {
namespace {

std::vector<Tensor> gradients(const std::vector<Tensor>& parameters, const char* fn) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    DP_CHECK(parameters[i].defined(), ValueError, fn, ": parameter ", i, " is an undefined tensor");
    Tensor g = parameters[i].grad();
    if (g.defined()) grads.push_back(g);
  }
  return grads;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type, bool error_if_nonfinite) {
  DP_CHECK(!std::isnan(max_norm), ValueError, "clip_grad_norm_: max_norm must not be NaN");
  DP_CHECK(!std::isnan(norm_type), ValueError, "clip_grad_norm_: norm_type must not be NaN");
  std::vector<Tensor> grads = gradients(parameters, "clip_grad_norm_");
  if (grads.empty()) return 0.0;
  NoGradGuard no_grad;
  const Device device = grads[0].device();
  Tensor total;
  std::vector<Tensor> norms;
  norms.reserve(grads.size());
  if (norm_type == std::numeric_limits<double>::infinity()) {
    for (const Tensor& g : grads) norms.push_back(dp::max(dp::abs(g.detach())).to(device));
    total = norms.size() == 1 ? norms[0] : dp::max(dp::stack(norms));
  } else {
    for (const Tensor& g : grads) norms.push_back(dp::norm(g.detach(), norm_type).to(device));
    total = dp::norm(dp::stack(norms), norm_type);
  }
  const double total_value = total.item<double>();
  if (error_if_nonfinite && !std::isfinite(total_value))
    throw ValueError(::dp::detail::str("clip_grad_norm_: the total norm of order ", norm_type, " for gradients from `parameters` is ", total_value,
                                       ", non-finite, so it cannot be clipped. To disable this error and scale the "
                                       "gradients by the non-finite norm anyway, set error_if_nonfinite=false"));
  // No `if (coef < 1)`: multiplying by the clamped coefficient (1 when no clipping is needed) is
  // what PyTorch does, and it needs no value from the device.
  const Tensor coef = dp::clamp(dp::div(Scalar(max_norm), dp::add(total, Scalar(1e-6))), std::nullopt, Scalar(1.0));
  for (Tensor& g : grads) dp::mul_(g, coef.to(g.device()));
  return total_value;
}

double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>(parameters), max_norm, norm_type, error_if_nonfinite);
}

double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  DP_CHECK(!std::isnan(clip_value), ValueError, "clip_grad_value_: clip_value must not be NaN");
  std::vector<Tensor> grads = gradients(parameters, "clip_grad_value_");
  NoGradGuard no_grad;
  for (Tensor& g : grads) dp::clamp_(g, Scalar(-clip_value), Scalar(clip_value));
}

void clip_grad_value_(std::initializer_list<Tensor> parameters, double clip_value) { clip_grad_value_(std::vector<Tensor>(parameters), clip_value); }

void clip_grad_value_(const Tensor& parameter, double clip_value) { clip_grad_value_(std::vector<Tensor>{parameter}, clip_value); }

}  // namespace dp::nn::utils
