#pragma once
#include <cstdint>
#include "dp/nn/module.h"

namespace dp::nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  LinearOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  bool bias() const { return bias_; }

 private:
  int64_t in_features_;
  int64_t out_features_;
  bool bias_ = true;
};

// y = x W^T + b over the last dimension; weight [out, in], bias [out].
class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features) : LinearImpl(LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(const LinearOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& input) const;
  std::string extra_repr() const override;

  LinearOptions options;
  Tensor weight;
  Tensor bias;
};
using Linear = ModuleHolder<LinearImpl>;

// Returns its input (a placeholder in Sequential).
class IdentityImpl : public Module {
 public:
  Tensor forward(const Tensor& input) const { return input; }
};
using Identity = ModuleHolder<IdentityImpl>;

}  // namespace dp::nn
