// dp::nn::functional losses: dp/ops/loss.h with the loss modules' options.
#include "dp/nn/functional/loss.h"
#include "dp/ops/loss.h"

namespace dp::nn::functional {

Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& o) {
  return dp::nll_loss(input, target, o.weight(), o.ignore_index(), o.reduction());
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyFuncOptions& o) {
  return dp::cross_entropy(input, target, o.weight(), o.ignore_index(), o.reduction(), o.label_smoothing());
}

Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& o) { return dp::mse_loss(input, target, o.reduction()); }

Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& o) { return dp::l1_loss(input, target, o.reduction()); }

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BinaryCrossEntropyFuncOptions& o) {
  return dp::binary_cross_entropy(input, target, o.weight(), o.reduction());
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const BinaryCrossEntropyWithLogitsFuncOptions& o) {
  return dp::binary_cross_entropy_with_logits(input, target, o.weight(), o.pos_weight(), o.reduction());
}

}  // namespace dp::nn::functional
