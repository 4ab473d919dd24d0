#pragma once
// dp::nn::functional dropout (torch::nn::functional's). Unlike the Dropout module the functional
// form does not know the training mode: pass it, as libtorch users do,
//
//   namespace F = dp::nn::functional;
//   x = F::dropout(x, F::DropoutFuncOptions().p(0.5).training(is_training()));
#include "dp/core/tensor.h"

namespace dp::nn::functional {

struct DropoutFuncOptions {
  // In [0, 1].
  DropoutFuncOptions& p(double v) {
    p_ = v;
    return *this;
  }
  // false: the input is returned unchanged (what eval() does to a Dropout module).
  DropoutFuncOptions& training(bool v) {
    training_ = v;
    return *this;
  }
  // Overwrite the input (and return it) instead of allocating the result.
  DropoutFuncOptions& inplace(bool v) {
    inplace_ = v;
    return *this;
  }
  double p() const { return p_; }
  bool training() const { return training_; }
  bool inplace() const { return inplace_; }

 private:
  double p_ = 0.5;
  bool training_ = true;
  bool inplace_ = false;
};

// dp::dropout / dp::dropout_; the mask comes from the input device's default generator.
Tensor dropout(Tensor input, const DropoutFuncOptions& options = {});

}  // namespace dp::nn::functional
