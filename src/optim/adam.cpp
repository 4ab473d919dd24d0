// Adam and AdamW share the state, the checks and the step; they differ in how weight decay
// enters (backend::AdamScalars::decoupled_weight_decay).
#include "dp/optim/adam.h"
#include <optional>
#include "dp/autograd/grad_mode.h"
#include "dp/ops/factory.h"
#include "backend/optim_kernels.h"
#include "optim/update_batch.h"
#include "optim/update_target.h"

namespace dp::optim {

namespace {

template <typename Options>
void check_adam_options(const Options& o, const char* name) {
  const auto [beta1, beta2] = o.betas();
  DP_CHECK(o.lr() >= 0, ValueError, name, ": invalid learning rate: ", o.lr());
  DP_CHECK(o.eps() >= 0, ValueError, name, ": invalid epsilon value: ", o.eps());
  DP_CHECK(beta1 >= 0 && beta1 < 1, ValueError, name, ": invalid beta parameter at index 0: ", beta1, " (must be in [0, 1))");
  DP_CHECK(beta2 >= 0 && beta2 < 1, ValueError, name, ": invalid beta parameter at index 1: ", beta2, " (must be in [0, 1))");
  DP_CHECK(o.weight_decay() >= 0, ValueError, name, ": invalid weight_decay value: ", o.weight_decay());
}

template <typename Options>
backend::AdamScalars adam_scalars(const Options& o, bool decoupled) {
  backend::AdamScalars s;
  s.lr = o.lr();
  s.beta1 = std::get<0>(o.betas());
  s.beta2 = std::get<1>(o.betas());
  s.eps = o.eps();
  s.weight_decay = o.weight_decay();
  s.amsgrad = o.amsgrad();
  s.maximize = o.maximize();
  s.decoupled_weight_decay = decoupled;
  return s;
}

Tensor zeros_for(const Tensor& p) { return zeros(p.sizes(), TensorOptions(p.dtype()).device(p.device())); }

// One step over every group; Options is AdamOptions or AdamWOptions.
template <typename Options>
void adam_step(std::vector<OptimizerParamGroup>& groups, std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>>& state,
               bool decoupled, const char* name) {
  NoGradGuard no_grad;
  for (auto& group : groups) {
    backend::AdamScalars s = adam_scalars(detail::options_as<Options>(group.options(), name), decoupled);
    detail::UpdateBatch<backend::AdamTensor> batch;
    std::optional<Device> checked;
    for (Tensor& p : group.params()) {
      Tensor g = detail::contiguous_grad(p);
      if (!g.defined()) continue;
      // Checked before any state changes, once per device and group (on CUDA a driver query: is a
      // graph being captured?). PyTorch's capturable=True keeps the step on the device instead.
      if (checked != p.device()) {
        backend::check_host_scalar_step_kernel(p.device().type, p.device().index, name);
        checked = p.device();
      }
      auto& slot = state[p.unsafe_impl()];
      if (!slot) {
        auto fresh = std::make_unique<AdamParamState>();
        fresh->exp_avg = zeros_for(p);
        fresh->exp_avg_sq = zeros_for(p);
        slot = std::move(fresh);
      }
      auto& st = static_cast<AdamParamState&>(*slot);
      // amsgrad may be switched on after the first steps (or by a loaded state): start at zero.
      if (s.amsgrad && !st.max_exp_avg_sq.defined()) st.max_exp_avg_sq = zeros_for(p);
      detail::check_state_buffer(p, st.exp_avg, name, "exp_avg");
      detail::check_state_buffer(p, st.exp_avg_sq, name, "exp_avg_sq");
      if (s.amsgrad) detail::check_state_buffer(p, st.max_exp_avg_sq, name, "max_exp_avg_sq");
      s.step = ++st.step;
      Tensor w = batch.target(name, p, g);
      batch.add(p, w,
                {w.data_ptr(), g.data_ptr(), st.exp_avg.data_ptr(), st.exp_avg_sq.data_ptr(), s.amsgrad ? st.max_exp_avg_sq.data_ptr() : nullptr,
                 w.numel(), st.step});
    }
    // One update call per (device, dtype) of the group, each tensor with its own step.
    batch.finish([&](Device device, DType dtype, const std::vector<backend::AdamTensor>& list) {
      backend::adam_update_kernel(device.type, dtype, device.index, list, s);
    });
  }
}

std::unique_ptr<OptimizerParamState> load_adam_state(const Tensor& param, size_t index, const std::map<std::string, Tensor>& saved,
                                                     const char* name) {
  auto st = std::make_unique<AdamParamState>();
  bool has_step = false;
  for (const auto& [field, t] : saved) {
    const std::string key = dp::detail::str("state.", index, ".", field);
    if (field == "step") {
      st->step = detail::adopt_step(t, key);
      has_step = true;
    } else if (field == "exp_avg") {
      st->exp_avg = detail::adopt_buffer(param, t, key);
    } else if (field == "exp_avg_sq") {
      st->exp_avg_sq = detail::adopt_buffer(param, t, key);
    } else if (field == "max_exp_avg_sq") {
      st->max_exp_avg_sq = detail::adopt_buffer(param, t, key);
    } else {
      throw ValueError(
          dp::detail::str(name, ".load_state_dict: unexpected key '", key, "' (", name, " keeps step, exp_avg, exp_avg_sq and max_exp_avg_sq)"));
    }
  }
  const char* missing = !has_step ? "step" : !st->exp_avg.defined() ? "exp_avg" : !st->exp_avg_sq.defined() ? "exp_avg_sq" : nullptr;
  DP_CHECK(missing == nullptr, ValueError, name, ".load_state_dict: the state of parameter ", index, " lacks state.", index, ".", missing);
  return st;
}

}  // namespace

// ---------------------------------------------------------------- options and state

void AdamOptions::visit(OptionsVisitor& v) {
  v.field("lr", lr_.value, lr_.is_set);
  v.field("betas", betas_.value, betas_.is_set);
  v.field("eps", eps_.value, eps_.is_set);
  v.field("weight_decay", weight_decay_.value, weight_decay_.is_set);
  v.field("amsgrad", amsgrad_.value, amsgrad_.is_set);
  v.field("maximize", maximize_.value, maximize_.is_set);
}

void AdamWOptions::visit(OptionsVisitor& v) {
  v.field("lr", lr_.value, lr_.is_set);
  v.field("betas", betas_.value, betas_.is_set);
  v.field("eps", eps_.value, eps_.is_set);
  v.field("weight_decay", weight_decay_.value, weight_decay_.is_set);
  v.field("amsgrad", amsgrad_.value, amsgrad_.is_set);
  v.field("maximize", maximize_.value, maximize_.is_set);
}

std::unique_ptr<OptimizerParamState> AdamParamState::clone() const {
  auto s = std::make_unique<AdamParamState>();
  s->step = step;
  if (exp_avg.defined()) s->exp_avg = exp_avg.clone();
  if (exp_avg_sq.defined()) s->exp_avg_sq = exp_avg_sq.clone();
  if (max_exp_avg_sq.defined()) s->max_exp_avg_sq = max_exp_avg_sq.clone();
  return s;
}

void AdamParamState::save(const std::string& prefix, OrderedDict<std::string, Tensor>& out) const {
  // int64 keeps the count exact at any length (torch 1.13 keeps a float32 tensor, and accepts this).
  out.insert(prefix + "step", scalar_tensor(step, kInt64));
  if (exp_avg.defined()) out.insert(prefix + "exp_avg", exp_avg);
  if (exp_avg_sq.defined()) out.insert(prefix + "exp_avg_sq", exp_avg_sq);
  if (max_exp_avg_sq.defined()) out.insert(prefix + "max_exp_avg_sq", max_exp_avg_sq);
}

// ---------------------------------------------------------------- Adam

Adam::Adam(std::vector<OptimizerParamGroup> param_groups, const AdamOptions& defaults) : Optimizer(std::make_unique<AdamOptions>(defaults)) {
  init_groups(std::move(param_groups));
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& defaults)
    : Adam(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

void Adam::check_options(const OptimizerOptions& options) const { check_adam_options(detail::options_as<AdamOptions>(options, name()), name()); }

Tensor Adam::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  adam_step<AdamOptions>(param_groups_, state_, /*decoupled=*/false, name());
  return loss;
}

std::unique_ptr<OptimizerParamState> Adam::load_param_state(const Tensor& param, size_t index, const std::map<std::string, Tensor>& saved) const {
  return load_adam_state(param, index, saved, name());
}

// ---------------------------------------------------------------- AdamW

AdamW::AdamW(std::vector<OptimizerParamGroup> param_groups, const AdamWOptions& defaults) : Optimizer(std::make_unique<AdamWOptions>(defaults)) {
  init_groups(std::move(param_groups));
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& defaults)
    : AdamW(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

void AdamW::check_options(const OptimizerOptions& options) const { check_adam_options(detail::options_as<AdamWOptions>(options, name()), name()); }

Tensor AdamW::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  adam_step<AdamWOptions>(param_groups_, state_, /*decoupled=*/true, name());
  return loss;
}

std::unique_ptr<OptimizerParamState> AdamW::load_param_state(const Tensor& param, size_t index, const std::map<std::string, Tensor>& saved) const {
  return load_adam_state(param, index, saved, name());
}

}  // namespace dp::optim
