// Loss modules: the weights live in buffers (registered even when absent, as PyTorch registers a
// None buffer, so the names and order match PyTorch's state_dict when they are given).
#include "dp/nn/modules/loss.h"

namespace dp::nn {

BCELossImpl::BCELossImpl(BCELossOptions options_) : options(std::move(options_)) {
  weight = register_buffer("weight", options.weight());
  bind_tensor<&BCELossImpl::weight>("weight");
}

Tensor BCELossImpl::forward(const Tensor& input, const Tensor& target) const {
  return binary_cross_entropy(input, target, weight, options.reduction());
}

BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(BCEWithLogitsLossOptions options_) : options(std::move(options_)) {
  weight = register_buffer("weight", options.weight());
  pos_weight = register_buffer("pos_weight", options.pos_weight());
  bind_tensor<&BCEWithLogitsLossImpl::weight>("weight");
  bind_tensor<&BCEWithLogitsLossImpl::pos_weight>("pos_weight");
}

Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) const {
  return binary_cross_entropy_with_logits(input, target, weight, pos_weight, options.reduction());
}

MSELossImpl::MSELossImpl(MSELossOptions options_) : options(options_) {}

Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, options.reduction()); }

L1LossImpl::L1LossImpl(L1LossOptions options_) : options(options_) {}

Tensor L1LossImpl::forward(const Tensor& input, const Tensor& target) const { return l1_loss(input, target, options.reduction()); }

NLLLossImpl::NLLLossImpl(NLLLossOptions options_) : options(std::move(options_)) {
  weight = register_buffer("weight", options.weight());
  bind_tensor<&NLLLossImpl::weight>("weight");
}

Tensor NLLLossImpl::forward(const Tensor& input, const Tensor& target) const {
  return nll_loss(input, target, weight, options.ignore_index(), options.reduction());
}

CrossEntropyLossImpl::CrossEntropyLossImpl(CrossEntropyLossOptions options_) : options(std::move(options_)) {
  weight = register_buffer("weight", options.weight());
  bind_tensor<&CrossEntropyLossImpl::weight>("weight");
}

Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) const {
  return cross_entropy(input, target, weight, options.ignore_index(), options.reduction(), options.label_smoothing());
}

}  // namespace dp::nn
