#pragma once
// dp::nn::functional batch_norm, layer_norm and normalize (torch::nn::functional's).
//
//   namespace F = dp::nn::functional;
//   y = F::batch_norm(x, running_mean, running_var, F::BatchNormFuncOptions().weight(w).bias(b).training(true));
//   z = F::layer_norm(x, F::LayerNormFuncOptions({16}).eps(1e-6));
//   u = F::normalize(x, F::NormalizeFuncOptions().dim(1));
#include <cstdint>
#include <vector>
#include "dp/core/tensor.h"

namespace dp::nn::functional {

struct BatchNormFuncOptions {
  BatchNormFuncOptions& weight(Tensor v) {
    weight_ = std::move(v);
    return *this;
  }
  BatchNormFuncOptions& bias(Tensor v) {
    bias_ = std::move(v);
    return *this;
  }
  // true: batch statistics, and the running buffers (when defined) are updated in place.
  BatchNormFuncOptions& training(bool v) {
    training_ = v;
    return *this;
  }
  BatchNormFuncOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  BatchNormFuncOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  bool training() const { return training_; }
  double momentum() const { return momentum_; }
  double eps() const { return eps_; }

 private:
  Tensor weight_;
  Tensor bias_;
  bool training_ = false;  // libtorch's default, unlike the module's
  double momentum_ = 0.1;
  double eps_ = 1e-5;
};

struct LayerNormFuncOptions {
  LayerNormFuncOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  LayerNormFuncOptions& weight(Tensor v) {
    weight_ = std::move(v);
    return *this;
  }
  LayerNormFuncOptions& bias(Tensor v) {
    bias_ = std::move(v);
    return *this;
  }
  LayerNormFuncOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  const std::vector<int64_t>& normalized_shape() const { return normalized_shape_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  double eps() const { return eps_; }

 private:
  std::vector<int64_t> normalized_shape_;
  Tensor weight_;
  Tensor bias_;
  double eps_ = 1e-5;
};

struct NormalizeFuncOptions {
  // The exponent of the norm, > 0 (infinity: the largest magnitude).
  NormalizeFuncOptions& p(double v) {
    p_ = v;
    return *this;
  }
  NormalizeFuncOptions& dim(int64_t v) {
    dim_ = v;
    return *this;
  }
  // The smallest denominator (a zero vector stays zero instead of becoming NaN).
  NormalizeFuncOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  double p() const { return p_; }
  int64_t dim() const { return dim_; }
  double eps() const { return eps_; }

 private:
  double p_ = 2.0;
  int64_t dim_ = 1;
  double eps_ = 1e-12;
};

// dp::batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps).
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const BatchNormFuncOptions& options = {});
// dp::layer_norm over the trailing normalized_shape dims.
Tensor layer_norm(const Tensor& input, const LayerNormFuncOptions& options);
// input / max(||input||_p over dim, eps), the norm broadcast back along dim. Written with dp ops
// (differentiable as they are); floating inputs.
Tensor normalize(const Tensor& input, const NormalizeFuncOptions& options = {});

}  // namespace dp::nn::functional
