#include "dp/nn/modules/batchnorm.h"

#include "dp/autograd/grad_mode.h"
#include "dp/nn/init.h"
#include "dp/nn/modules/normalization.h"
#include "dp/ops/factory.h"
#include "dp/ops/normalization.h"

namespace dp::nn {

BatchNormImplBase::BatchNormImplBase(const BatchNormOptions& opts) : options(opts) {
  const int64_t c = options.num_features();
  DP_CHECK(c >= 0, ValueError, "BatchNorm: num_features must be non-negative, got ", c);
  // PyTorch's _NormBase registers every slot, absent ones as None, in this order.
  weight = register_parameter("weight", options.affine() ? empty({c}) : Tensor());
  bias = register_parameter("bias", options.affine() ? empty({c}) : Tensor());
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", scalar_tensor(0, kInt64));
  } else {
    running_mean = register_buffer("running_mean", Tensor());
    running_var = register_buffer("running_var", Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", Tensor());
  }
  bind_tensor<&BatchNormImplBase::weight>("weight");
  bind_tensor<&BatchNormImplBase::bias>("bias");
  bind_tensor<&BatchNormImplBase::running_mean>("running_mean");
  bind_tensor<&BatchNormImplBase::running_var>("running_var");
  bind_tensor<&BatchNormImplBase::num_batches_tracked>("num_batches_tracked");
  reset_parameters();
}

void BatchNormImplBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNormImplBase::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor BatchNormImplBase::forward(const Tensor& input) {
  check_input_dim(input);
  // PyTorch's _BatchNorm.forward: count the batch, pick the averaging factor, and use batch
  // statistics in training or when no running statistics are kept.
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    {
      NoGradGuard no_grad;
      num_batches_tracked.add_(1);
    }
    if (!options.momentum()) factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  const bool use_batch_stats = is_training() || (!running_mean.defined() && !running_var.defined());
  const bool pass_running = !is_training() || options.track_running_stats();
  return batch_norm(input, pass_running ? running_mean : Tensor(), pass_running ? running_var : Tensor(), weight, bias, use_batch_stats, factor,
                    options.eps());
}

std::string BatchNormImplBase::extra_repr() const {
  const auto m = options.momentum();
  return std::to_string(options.num_features()) + ", eps=" + detail::python_float_repr(options.eps()) +
         ", momentum=" + (m ? detail::python_float_repr(*m) : "None") + ", affine=" + (options.affine() ? "True" : "False") +
         ", track_running_stats=" + (options.track_running_stats() ? "True" : "False");
}

void BatchNorm1dImpl::check_input_dim(const Tensor& input) const {
  DP_CHECK(input.dim() == 2 || input.dim() == 3, ValueError, "BatchNorm1d: expected 2D or 3D input (got ", input.dim(), "D input)");
}

void BatchNorm2dImpl::check_input_dim(const Tensor& input) const {
  DP_CHECK(input.dim() == 4, ValueError, "BatchNorm2d: expected 4D input (got ", input.dim(), "D input)");
}

}  // namespace dp::nn
