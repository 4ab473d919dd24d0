#pragma once
// Adam and AdamW: torch.optim.Adam / AdamW (1.13, foreach=False) update for update (bias
// corrections, eps added after sqrt(v_hat), amsgrad, maximize), one fused pass per parameter.
// Adam adds weight_decay * param to the gradient (L2); AdamW decays the parameter itself
// (param *= 1 - lr * weight_decay) before the Adam update.
#include <memory>
#include <tuple>
#include <vector>
#include "dp/optim/optimizer.h"

namespace dp::optim {

// (beta1, beta2): running-average coefficients of the gradient and its square.
using AdamBetas = std::tuple<double, double>;

struct AdamOptions : public OptimizerCloneableOptions<AdamOptions> {
  // lr unset (default 1e-3): a group's options built this way take the optimizer's lr.
  AdamOptions() = default;
  explicit AdamOptions(double lr) { this->lr(lr); }
  DP_OPTIM_ARG(double, lr, 1e-3);
  DP_OPTIM_ARG(AdamBetas, betas, std::make_tuple(0.9, 0.999));
  DP_OPTIM_ARG(double, eps, 1e-8);
  DP_OPTIM_ARG(double, weight_decay, 0.0);
  DP_OPTIM_ARG(bool, amsgrad, false);
  DP_OPTIM_ARG(bool, maximize, false);

 public:
  double get_lr() const override { return lr(); }
  void set_lr(double lr) override { this->lr(lr); }
  void visit(OptionsVisitor& v) override;
};

// The same fields as AdamOptions; weight decay is decoupled and defaults to 0.01.
struct AdamWOptions : public OptimizerCloneableOptions<AdamWOptions> {
  AdamWOptions() = default;
  explicit AdamWOptions(double lr) { this->lr(lr); }
  DP_OPTIM_ARG(double, lr, 1e-3);
  DP_OPTIM_ARG(AdamBetas, betas, std::make_tuple(0.9, 0.999));
  DP_OPTIM_ARG(double, eps, 1e-8);
  DP_OPTIM_ARG(double, weight_decay, 1e-2);
  DP_OPTIM_ARG(bool, amsgrad, false);
  DP_OPTIM_ARG(bool, maximize, false);

 public:
  double get_lr() const override { return lr(); }
  void set_lr(double lr) override { this->lr(lr); }
  void visit(OptionsVisitor& v) override;
};

struct AdamParamState : public OptimizerParamState {
  int64_t step = 0;
  Tensor exp_avg;
  Tensor exp_avg_sq;
  Tensor max_exp_avg_sq;  // amsgrad only
  std::unique_ptr<OptimizerParamState> clone() const override;
  void save(const std::string& prefix, OrderedDict<std::string, Tensor>& out) const override;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<OptimizerParamGroup> param_groups, const AdamOptions& defaults = {});
  Adam(std::vector<Tensor> params, const AdamOptions& defaults = {});

  Tensor step(LossClosure closure = nullptr) override;
  const char* name() const override { return "Adam"; }

 protected:
  void check_options(const OptimizerOptions& options) const override;
  std::unique_ptr<OptimizerParamState> load_param_state(const Tensor& param, size_t index, const std::map<std::string, Tensor>& saved) const override;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<OptimizerParamGroup> param_groups, const AdamWOptions& defaults = {});
  AdamW(std::vector<Tensor> params, const AdamWOptions& defaults = {});

  Tensor step(LossClosure closure = nullptr) override;
  const char* name() const override { return "AdamW"; }

 protected:
  void check_options(const OptimizerOptions& options) const override;
  std::unique_ptr<OptimizerParamState> load_param_state(const Tensor& param, size_t index, const std::map<std::string, Tensor>& saved) const override;
};

}  // namespace dp::optim
