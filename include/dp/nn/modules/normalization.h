#pragma once
// LayerNorm (torch.nn.LayerNorm).
#include <cstdint>
#include <string>
#include <vector>
#include "dp/nn/module.h"

namespace dp::nn {

struct LayerNormOptions {
  LayerNormOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  LayerNormOptions& eps(double e) {
    eps_ = e;
    return *this;
  }
  // A learnable weight (ones) and bias (zeros) of shape normalized_shape.
  LayerNormOptions& elementwise_affine(bool a) {
    elementwise_affine_ = a;
    return *this;
  }
  const std::vector<int64_t>& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }

 private:
  std::vector<int64_t> normalized_shape_;
  double eps_ = 1e-5;
  bool elementwise_affine_ = true;
};

// Normalises over the trailing normalized_shape dims of its input (dp::layer_norm).
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(std::vector<int64_t> normalized_shape) : LayerNormImpl(LayerNormOptions(std::move(normalized_shape))) {}
  explicit LayerNormImpl(const LayerNormOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& input) const;
  // "(10,), eps=1e-05, elementwise_affine=True"
  std::string extra_repr() const override;

  LayerNormOptions options;
  Tensor weight;  // undefined without elementwise_affine
  Tensor bias;
};
using LayerNorm = ModuleHolder<LayerNormImpl>;

namespace detail {
// Python's repr() of a float ("1e-05", "0.1", "1.0", "0.0001", "1e+16"): the shortest digits that
// read back as the same double, in Python's fixed / scientific choice. Used by extra_repr()s.
std::string python_float_repr(double v);
}  // namespace detail

}  // namespace dp::nn
