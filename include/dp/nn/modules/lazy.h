#pragma once
// Lazy modules (torch.nn.LazyLinear, torch.nn.modules.lazy.LazyModuleMixin): layers whose input
// size is read from the first input they see.
//
//   dp::nn::LazyLinear fc(4);                 // in_features unknown: weight and bias uninitialized
//   fc(dp::randn({2, 3}));                    // now weight [4, 3], bias [4], initialised as Linear(3, 4)
//   dp::optim::SGD opt(fc->parameters(), 0.1);   // create optimizers after the first forward
//
// Before the first forward the parameters are registered (named_parameters() and state_dict()
// list "weight" and "bias", as PyTorch lists its UninitializedParameters) but hold placeholder
// tensors of shape [0]; to() moves and converts the placeholders, and the first forward gives
// them their shape on that device and dtype, in place (handles taken earlier stay valid), then
// initialises them exactly as Linear(in_features, out_features) would (same random draws).
// Until then:
//  - DataParallel on two or more devices, replicate() and data_parallel() refuse the module with a
//    ValueError carrying PyTorch's message ("Modules with uninitialized parameters can't be used
//    with `DataParallel`. Run a dummy forward pass to correctly initialize the modules") and which
//    module it is; run one forward first. (With one device DataParallel calls the module itself.)
//  - load_state_dict() needs the shapes: run a forward (or initialize_parameters) first, else it
//    reports a size mismatch for the key.
// After initialisation the module prints as PyTorch's class it becomes ("Linear(...)").
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include "dp/nn/module.h"

namespace dp::nn {

// Implemented by modules whose parameters are shaped at their first forward. DataParallel asks
// every module of the tree through this interface before it replicates.
class LazyModuleMixin {
 public:
  virtual ~LazyModuleMixin() = default;
  // True while some parameter still waits for its shape.
  virtual bool has_uninitialized_params() const = 0;
};

// The path ("" for `module` itself, else "block.fc") of the first module of the tree, in
// pre-order, that has uninitialized parameters; nullopt when there is none.
std::optional<std::string> first_uninitialized_module(const Module& module);

struct LazyLinearOptions {
  LazyLinearOptions(int64_t out_features) : out_features_(out_features) {}  // NOLINT: LazyLinear(4)
  LazyLinearOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
  int64_t out_features() const { return out_features_; }
  bool bias() const { return bias_; }

 private:
  int64_t out_features_;
  bool bias_ = true;
};

// Linear with in_features taken from the last dimension of the first input.
class LazyLinearImpl : public Module, public LazyModuleMixin {
 public:
  explicit LazyLinearImpl(const LazyLinearOptions& options);
  explicit LazyLinearImpl(int64_t out_features) : LazyLinearImpl(LazyLinearOptions(out_features)) {}

  // The first call shapes and initialises the parameters from input.size(-1); every call returns
  // x W^T + b. The input needs at least one dimension; later inputs must have in_features() in
  // their last one (ShapeError otherwise).
  Tensor forward(const Tensor& input);
  // What the first forward does, without an input (ValueError if already initialised or if
  // in_features is negative). Under no_grad; the shapes take the placeholders' device and dtype.
  void initialize_parameters(int64_t in_features);
  // Re-draws the parameters as Linear does; nothing while uninitialised (as PyTorch).
  void reset_parameters();
  bool has_uninitialized_params() const override { return !initialized_; }
  // 0 until initialised.
  int64_t in_features() const { return in_features_; }

  // "in_features=0, out_features=4, bias=True" before, the real in_features after.
  std::string extra_repr() const override;
  // "LazyLinear(...)" before initialisation, "Linear(...)" after (PyTorch's class change).
  void pretty_print(std::ostream& os) const override;

  LazyLinearOptions options;
  Tensor weight;
  Tensor bias;

 private:
  bool initialized_ = false;
  int64_t in_features_ = 0;
};
using LazyLinear = ModuleHolder<LazyLinearImpl>;

}  // namespace dp::nn
