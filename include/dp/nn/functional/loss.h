#pragma once
// dp::nn::functional losses (torch::nn::functional's). As in libtorch the options are the loss
// modules' (CrossEntropyFuncOptions is CrossEntropyLossOptions), so weight, ignore_index,
// reduction, label_smoothing and pos_weight are set the same way:
//
//   namespace F = dp::nn::functional;
//   l = F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().ignore_index(-1));
//   m = F::mse_loss(a, b, F::MSELossFuncOptions().reduction(dp::Reduction::Sum));
#include "dp/core/tensor.h"
#include "dp/nn/modules/loss.h"

namespace dp::nn::functional {

using NLLLossFuncOptions = NLLLossOptions;
using CrossEntropyFuncOptions = CrossEntropyLossOptions;
using MSELossFuncOptions = MSELossOptions;
using L1LossFuncOptions = L1LossOptions;
using BinaryCrossEntropyFuncOptions = BCELossOptions;
using BinaryCrossEntropyWithLogitsFuncOptions = BCEWithLogitsLossOptions;

// Each forwards to the dp op of the same name (dp/ops/loss.h) with the options' fields.
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& options = {});
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyFuncOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& options = {});
Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& options = {});
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BinaryCrossEntropyFuncOptions& options = {});
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const BinaryCrossEntropyWithLogitsFuncOptions& options = {});

}  // namespace dp::nn::functional
