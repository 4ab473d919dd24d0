#pragma once
// dp::nn::functional pad (torch::nn::functional's), constant mode.
//
//   namespace F = dp::nn::functional;
//   y = F::pad(x, F::PadFuncOptions({1, 1, 2, 0}).value(-1.0));   // last dim 1 | 1, the one before 2 | 0
#include <cstdint>
#include <vector>
#include "dp/core/scalar.h"
#include "dp/core/tensor.h"

namespace dp::nn::functional {

// `pad` holds (before, after) pairs starting from the last dimension, as PyTorch's: at most
// 2 * input.dim() values, an even count. Negative amounts crop. Only the constant mode exists here
// (reflect / replicate / circular are not implemented).
struct PadFuncOptions {
  PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}  // NOLINT
  PadFuncOptions& value(double v) {
    value_ = v;
    return *this;
  }
  const std::vector<int64_t>& pad() const { return pad_; }
  double value() const { return value_; }

 private:
  std::vector<int64_t> pad_;
  double value_ = 0.0;
};

// Written with dp ops (narrow for crops, cat with constant blocks for padding: one cat per padded
// dim), so it is differentiable w.r.t. input. ValueError for an odd or too long pad list, or a crop
// that leaves a negative size (naming the dim and sizes).
Tensor pad(const Tensor& input, const PadFuncOptions& options);

}  // namespace dp::nn::functional
