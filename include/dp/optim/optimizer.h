#pragma once
// The optimizer base (libtorch's torch::optim::Optimizer): parameter groups with their own
// hyper-parameters, per-parameter state keyed by the parameter's TensorImpl, zero_grad, and a plain
// state dict (tensors + string metadata) that a checkpoint can store as safetensors.
//
// Hyper-parameters a group's options leave unset are taken from the optimizer's defaults, field
// by field (torch.optim's rule: `{{w}, SGDOptions().lr(0.01)}` keeps the defaults' momentum); a
// group given no options at all takes every default (libtorch's rule).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>
#include "dp/core/ordered_dict.h"
#include "dp/core/tensor.h"

namespace dp::optim {

// Walks an options struct's fields by name (serialization, inheritance from the defaults).
class OptionsVisitor {
 public:
  virtual ~OptionsVisitor() = default;
  virtual void field(const char* name, double& value, bool& is_set) = 0;
  virtual void field(const char* name, bool& value, bool& is_set) = 0;
  virtual void field(const char* name, std::tuple<double, double>& value, bool& is_set) = 0;
};

namespace detail {
// A hyper-parameter value plus whether the user set it (unset ones inherit from the defaults).
template <typename T>
struct OptionArg {
  T value;
  bool is_set = false;
};
}  // namespace detail

// Declares a chainable hyper-parameter, as libtorch's TORCH_ARG: `opts.momentum(0.9)` sets it
// (and returns the options), `opts.momentum()` reads it.
#define DP_OPTIM_ARG(T, name, default_value)                     \
 public:                                                         \
  auto name(const T& new_value)->decltype(*this) {               \
    name##_ = {new_value, true};                                 \
    return *this;                                                \
  }                                                              \
  const T& name() const noexcept { return name##_.value; }       \
  bool name##_is_set() const noexcept { return name##_.is_set; } \
                                                                 \
 private:                                                        \
  ::dp::optim::detail::OptionArg<T> name##_ { default_value, false }

// Hyper-parameters of one parameter group.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  // The learning rate: what schedulers read and write.
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // Calls v.field(...) once per hyper-parameter, in PyTorch's param_groups order.
  virtual void visit(OptionsVisitor& v) = 0;
};

// CRTP helper: clone() for an options struct.
template <typename Derived>
class OptimizerCloneableOptions : public OptimizerOptions {
 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<Derived>(static_cast<const Derived&>(*this)); }
};

// Per-parameter state (momentum buffers, Adam moments, ...).
class OptimizerParamState {
 public:
  virtual ~OptimizerParamState() = default;
  virtual std::unique_ptr<OptimizerParamState> clone() const = 0;
  // Adds this state's tensors as "<prefix><name>" (e.g. prefix "state.3." -> "state.3.exp_avg").
  virtual void save(const std::string& prefix, OrderedDict<std::string, Tensor>& out) const = 0;
};

// A list of parameters and (optionally) their own hyper-parameters.
class OptimizerParamGroup {
 public:
  OptimizerParamGroup(std::vector<Tensor> params);  // NOLINT: every option from the defaults
  OptimizerParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options);
  template <typename Options, std::enable_if_t<std::is_base_of_v<OptimizerOptions, Options>, int> = 0>
  OptimizerParamGroup(std::vector<Tensor> params, const Options& options) : params_(std::move(params)), options_(options.clone()) {}
  OptimizerParamGroup(const OptimizerParamGroup& o);
  OptimizerParamGroup& operator=(const OptimizerParamGroup& o);
  OptimizerParamGroup(OptimizerParamGroup&&) noexcept = default;
  OptimizerParamGroup& operator=(OptimizerParamGroup&&) noexcept = default;

  bool has_options() const { return options_ != nullptr; }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }
  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

// What state_dict() returns and load_state_dict() takes: plain enough to store as safetensors.
//  tensors: "state.<i>.<name>" for parameter i (numbered across groups in order, as PyTorch does),
//           e.g. "state.0.momentum_buffer", "state.3.exp_avg", "state.3.step" (int64 scalar).
//  metadata: "param_groups" = JSON list of each group's hyper-parameters plus "params" (its
//           parameter indices), as in torch.optim's state_dict; "optimizer" = "SGD", "Adam", ...
struct OptimizerState {
  OrderedDict<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

class Optimizer {
 public:
  using LossClosure = std::function<Tensor()>;

  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient (others are skipped). With a closure, calls
  // it first (grad mode on) and returns its loss. Runs under no-grad; parameters change in place
  // and their version counters are bumped.
  virtual Tensor step(LossClosure closure = nullptr) = 0;
  // Adds a group; options it leaves unset come from the defaults. Checks as the constructor does.
  // Virtual so that a wrapper (ZeroRedundancyOptimizer) can repartition.
  virtual void add_param_group(const OptimizerParamGroup& group);
  // set_to_none: drop the gradients (default, as PyTorch 2 / libtorch); else zero them in place.
  void zero_grad(bool set_to_none = true);

  std::vector<OptimizerParamGroup>& param_groups() { return param_groups_; }
  const std::vector<OptimizerParamGroup>& param_groups() const { return param_groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  // All parameters, group by group (the order state_dict numbers them in).
  std::vector<Tensor> parameters() const;
  // Number of parameters over all groups.
  size_t size() const;
  // The learning rate of group i (what schedulers read and write).
  double get_lr(size_t group) const;
  void set_lr(size_t group, double lr);

  // Per-parameter state, keyed by the parameter's TensorImpl; absent until the parameter's first
  // update (or a load_state_dict).
  std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>>& state() { return state_; }
  const std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>>& state() const { return state_; }

  // The state's tensors alias the optimizer's buffers (as in PyTorch): clone to keep a snapshot.
  // Virtual so that a wrapper whose state lives elsewhere (ZeroRedundancyOptimizer: sharded over
  // ranks) still saves and loads through dp::save / dp::load.
  virtual OptimizerState state_dict() const;
  // Replaces hyper-parameters and state with saved ones (copied, cast to each parameter's dtype
  // and device). Checks group count, per-group parameter counts, keys and tensor shapes first;
  // on error nothing is changed.
  virtual void load_state_dict(const OptimizerState& state);

  // "SGD", "Adam", "AdamW".
  virtual const char* name() const = 0;

 protected:
  explicit Optimizer(std::unique_ptr<OptimizerOptions> defaults);
  // Subclass constructors call this after checking the defaults (virtual calls work there).
  void init_groups(std::vector<OptimizerParamGroup> groups);
  // Rejects bad hyper-parameter values with a ValueError naming the optimizer and the field.
  virtual void check_options(const OptimizerOptions& options) const = 0;
  // Builds parameter `index`'s state from its saved tensors (keyed by state name: "exp_avg", ...);
  // throws ValueError naming the key when a tensor is missing, unknown or of the wrong shape.
  virtual std::unique_ptr<OptimizerParamState> load_param_state(const Tensor& param, size_t index,
                                                                const std::map<std::string, Tensor>& saved) const = 0;
  // A saved buffer for `param`: checks its shape and returns a contiguous copy in the parameter's
  // dtype and on its device. `key` ("state.3.exp_avg") names it in errors.
  static Tensor adopt_buffer(const Tensor& param, const Tensor& saved, const std::string& key);
  // A saved step count (a one-element tensor of any numeric dtype holding an integer >= 0).
  static int64_t adopt_step(const Tensor& saved, const std::string& key);
  // Calls the closure (if any) with grad mode on; returns its loss or an undefined tensor.
  static Tensor run_closure(const LossClosure& closure);
  // The gradient to use for a parameter: undefined when it has none (skip it), else contiguous.
  static Tensor contiguous_grad(const Tensor& param);

  std::vector<OptimizerParamGroup> param_groups_;
  std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>> state_;
  std::unique_ptr<OptimizerOptions> defaults_;
};

}  // namespace dp::optim
