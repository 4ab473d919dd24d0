#pragma once
// Dropout (torch.nn.Dropout): active in train(), the identity in eval().
#include <string>
#include "dp/nn/module.h"

namespace dp::nn {

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: Dropout(0.2)
  DropoutOptions& p(double v) { p_ = v; return *this; }
  // Overwrite the input instead of returning a new tensor.
  DropoutOptions& inplace(bool v) { inplace_ = v; return *this; }
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

}  // namespace dp::nn
