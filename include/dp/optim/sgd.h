#pragma once
// Stochastic gradient descent with momentum, dampening, Nesterov momentum, weight decay and
// maximize: torch.optim.SGD (1.13, foreach=False) update for update, one fused pass per parameter.
#include <memory>
#include <vector>
#include "dp/optim/optimizer.h"

namespace dp::optim {

struct SGDOptions : public OptimizerCloneableOptions<SGDOptions> {
  // lr unset: only for a group's options (it then takes the optimizer's lr).
  SGDOptions() = default;
  explicit SGDOptions(double lr) { this->lr(lr); }
  DP_OPTIM_ARG(double, lr, 0.0);
  DP_OPTIM_ARG(double, momentum, 0.0);
  DP_OPTIM_ARG(double, dampening, 0.0);
  DP_OPTIM_ARG(double, weight_decay, 0.0);
  DP_OPTIM_ARG(bool, nesterov, false);
  DP_OPTIM_ARG(bool, maximize, false);

 public:
  double get_lr() const override { return lr(); }
  void set_lr(double lr) override { this->lr(lr); }
  void visit(OptionsVisitor& v) override;
};

struct SGDParamState : public OptimizerParamState {
  Tensor momentum_buffer;  // undefined until the first step with momentum != 0
  std::unique_ptr<OptimizerParamState> clone() const override;
  void save(const std::string& prefix, OrderedDict<std::string, Tensor>& out) const override;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<OptimizerParamGroup> param_groups, const SGDOptions& defaults);
  SGD(std::vector<Tensor> params, const SGDOptions& defaults);

  Tensor step(LossClosure closure = nullptr) override;
  const char* name() const override { return "SGD"; }

 protected:
  void check_options(const OptimizerOptions& options) const override;
  std::unique_ptr<OptimizerParamState> load_param_state(const Tensor& param, size_t index, const std::map<std::string, Tensor>& saved) const override;
};

}  // namespace dp::optim
