#pragma once
// Dropout (torch.nn.Dropout) and the channel-wise Dropout2d and FeatureDropout: active in
// train(), the identity in eval().
#include <string>
#include "dp/nn/module.h"

namespace dp::nn {

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: Dropout(0.2)
  DropoutOptions& p(double v) {
    p_ = v;
    return *this;
  }
  // Overwrite the input instead of returning a new tensor.
  DropoutOptions& inplace(bool v) {
    inplace_ = v;
    return *this;
  }
  double p() const { return p_; }
  bool inplace() const { return inplace_; }

 private:
  double p_;
  bool inplace_ = false;
};

class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(const DropoutOptions& options = {});
  // The default generator of the input's device draws the mask (seed it with dp::manual_seed).
  Tensor forward(const Tensor& input) const;
  // "p=0.5, inplace=False"
  std::string extra_repr() const override;

  DropoutOptions options;
};
using Dropout = ModuleHolder<DropoutImpl>;
using Dropout2dOptions = DropoutOptions;
using FeatureDropoutOptions = DropoutOptions;

// Dropout2d (libtorch's torch::nn::Dropout2d): zeroes whole channels, each with probability p,
// and scales the kept ones by 1 / (1 - p). Input [N, C, H, W], or [C, H, W] without a batch
// dimension (channel = dimension 0, as libtorch and newer PyTorch read it; PyTorch 1.13's Python
// class reads a 3-D input as [N, C, L] instead, which is what FeatureDropout does). Other ranks
// are a ShapeError. The mask is drawn from the input device's default generator.
class Dropout2dImpl : public Module {
 public:
  explicit Dropout2dImpl(const Dropout2dOptions& options = {});
  Tensor forward(const Tensor& input) const;
  // "p=0.5, inplace=False"
  std::string extra_repr() const override;

  Dropout2dOptions options;
};
using Dropout2d = ModuleHolder<Dropout2dImpl>;

// FeatureDropout (torch.feature_dropout as a module; libtorch's former torch::nn::FeatureDropout):
// for any input [N, C, *] of at least 2 dimensions, zeroes each (n, c) slice with probability p
// and scales the kept ones by 1 / (1 - p). On [N, C, H, W] it is Dropout2d; on a 3-D input it
// is PyTorch 1.13's nn.Dropout2d ([N, C, L]).
class FeatureDropoutImpl : public Module {
 public:
  explicit FeatureDropoutImpl(const FeatureDropoutOptions& options = {});
  Tensor forward(const Tensor& input) const;
  // "p=0.5, inplace=False"
  std::string extra_repr() const override;

  FeatureDropoutOptions options;
};
using FeatureDropout = ModuleHolder<FeatureDropoutImpl>;

}  // namespace dp::nn
