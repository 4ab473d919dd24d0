#pragma once
// Gradient clipping (libtorch's torch::nn::utils::clip_grad_norm_ / clip_grad_value_, with
// torch.nn.utils' 1.13 semantics). Call between backward() and the optimizer's step():
//
//   loss.backward();
//   double norm = dp::nn::utils::clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);
//   optimizer.step();
//
// Parameters without a gradient are skipped. The gradients may be on different devices (each
// gradient's norm is computed on its device and the total on the first gradient's device, as
// PyTorch's Python version does); they are changed in place.
#include <initializer_list>
#include <limits>
#include <vector>
#include "dp/core/tensor.h"

namespace dp::nn::utils {

// Scales the gradients so that their total norm (the norm of the vector of every gradient's
// norm, of order norm_type as dp::norm takes it: 2, 1, any p, or
// `std::numeric_limits<double>::infinity()` for the largest absolute value) is at most max_norm:
// each is multiplied by min(1, max_norm / (total + 1e-6)).
// Returns the total norm before clipping (0 when no parameter has a gradient). A total that is
// NaN or infinite scales the gradients by it (they become NaN or 0), unless error_if_nonfinite,
// which throws ValueError instead and leaves them unchanged.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);
double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);
double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value], in place.
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);
void clip_grad_value_(std::initializer_list<Tensor> parameters, double clip_value);
void clip_grad_value_(const Tensor& parameter, double clip_value);

}  // namespace dp::nn::utils
