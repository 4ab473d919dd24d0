#pragma once
// Element-wise activations and (log-)softmax as modules.
#include <string>
#include "dp/nn/module.h"

namespace dp::nn {

class ReLUImpl : public Module {
 public:
  explicit ReLUImpl(bool inplace = false) : inplace(inplace) {}
  Tensor forward(const Tensor& input) const;
  std::string extra_repr() const override { return inplace ? "inplace=True" : ""; }
  bool inplace;
};
using ReLU = ModuleHolder<ReLUImpl>;

class SigmoidImpl : public Module {
 public:
  Tensor forward(const Tensor& input) const;
};
using Sigmoid = ModuleHolder<SigmoidImpl>;

class TanhImpl : public Module {
 public:
  Tensor forward(const Tensor& input) const;
};
using Tanh = ModuleHolder<TanhImpl>;

// approximate: "none" (exact, erf) or "tanh".
class GELUImpl : public Module {
 public:
  explicit GELUImpl(std::string approximate = "none");
  Tensor forward(const Tensor& input) const;
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }
  std::string approximate;
};
using GELU = ModuleHolder<GELUImpl>;

class SoftmaxImpl : public Module {
 public:
  explicit SoftmaxImpl(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input) const;
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};
using Softmax = ModuleHolder<SoftmaxImpl>;

class LogSoftmaxImpl : public Module {
 public:
  explicit LogSoftmaxImpl(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input) const;
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};
using LogSoftmax = ModuleHolder<LogSoftmaxImpl>;

// Flattens dimensions start_dim..end_dim (default: all but the batch dimension).
class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) const;
  std::string extra_repr() const override;
  int64_t start_dim;
  int64_t end_dim;
};
using Flatten = ModuleHolder<FlattenImpl>;

}  // namespace dp::nn
