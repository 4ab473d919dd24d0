// GradScaler: PyTorch 1.13's torch/cuda/amp/grad_scaler.py, with its two CUDA kernels
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) written with dp ops and host
// arithmetic so that it runs on every device. The scale and the growth tracker live on the host
// (PyTorch keeps them on the GPU to avoid a sync; here the inf check reads one number per gradient).
#include "dp/optim/grad_scaler.h"

#include <cmath>
#include "dp/autograd/grad_mode.h"
#include "dp/core/errors.h"
#include "dp/ops/factory.h"
#include "dp/ops/reduction.h"

namespace dp::amp {
namespace {

void check_growth_factor(double v) {
  DP_CHECK(std::isfinite(v) && v > 1.0, ValueError, "GradScaler: growth_factor must be a finite number > 1, got ", v);
}
void check_backoff_factor(double v) { DP_CHECK(v > 0.0 && v < 1.0, ValueError, "GradScaler: backoff_factor must be in (0, 1), got ", v); }
void check_growth_interval(int64_t v) {
  DP_CHECK(v > 0 && v <= INT32_MAX, ValueError, "GradScaler: growth_interval must be a positive int32, got ", v);
}
void check_scale(const char* what, double v) {
  DP_CHECK(std::isfinite(v) && v > 0.0 && std::isfinite(static_cast<float>(v)), ValueError, "GradScaler: ", what,
           " must be a positive number that float32 holds, got ", v);
}

// Whether t holds an inf or a nan: t * 0 is 0 where t is finite and nan elsewhere, so its sum is
// 0 exactly when every element is finite (no overflow is possible: every term is 0 or nan).
bool has_non_finite(const Tensor& t) {
  const double s = dp::sum(t * 0).item<double>();
  return s != 0.0 || std::isnan(s);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions o)
    : init_scale_(o.init_scale_),
      growth_factor_(o.growth_factor_),
      backoff_factor_(o.backoff_factor_),
      growth_interval_(o.growth_interval_),
      enabled_(o.enabled_) {
  check_scale("init_scale", init_scale_);
  check_growth_factor(growth_factor_);
  check_backoff_factor(backoff_factor_);
  check_growth_interval(growth_interval_);
  scale_ = static_cast<float>(init_scale_);
}

void GradScaler::check_initialized(const char* fn) const {
  DP_CHECK(initialized_, ValueError, "GradScaler::", fn,
           ": the scale was never used. This may indicate your loop did not call scaler.scale(loss or outputs) earlier "
           "in the iteration.");
}

Tensor GradScaler::scale_on(Device device) const { return dp::full({1}, static_cast<double>(scale_), TensorOptions(kFloat32).device(device)); }

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!enabled_) return outputs;
  DP_CHECK(outputs.defined(), ValueError, "GradScaler::scale: outputs is an undefined tensor");
  initialized_ = true;
  return outputs * scale_on(outputs.device());
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (const Tensor& t : outputs) out.push_back(scale(t));
  return out;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  check_initialized("unscale_");
  PerOptimizer& st = per_optimizer_[&optimizer];
  DP_CHECK(st.stage != Stage::Unscaled, ValueError,
           "GradScaler::unscale_: unscale_() has already been called on this optimizer since the last update().");
  DP_CHECK(st.stage != Stage::Stepped, ValueError, "GradScaler::unscale_: unscale_() is being called after step().");
  // PyTorch: inv_scale = scale.double().reciprocal().float(); every gradient is multiplied by it,
  // also when an inf was found (the step is skipped then anyway).
  const double inv_scale = static_cast<double>(static_cast<float>(1.0 / static_cast<double>(scale_)));
  NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    for (Tensor& p : group.params()) {
      Tensor& g = p.mutable_grad();
      if (!g.defined()) continue;
      DP_CHECK(g.dtype() != kFloat16, DTypeError, "GradScaler::unscale_: attempting to unscale float16 gradients (a parameter of shape ",
               p.size_str(), "); keep the parameters in float32 and let autocast cast them");
      st.recorded = true;
      if (!st.found_inf && has_non_finite(g)) st.found_inf = true;
      g.mul_(inv_scale);
    }
  }
  st.stage = Stage::Unscaled;
}

Tensor GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) return optimizer.step();
  check_initialized("step");
  DP_CHECK(per_optimizer_[&optimizer].stage != Stage::Stepped, ValueError,
           "GradScaler::step: step() has already been called since the last update().");
  if (per_optimizer_[&optimizer].stage == Stage::Ready) unscale_(optimizer);
  PerOptimizer& st = per_optimizer_[&optimizer];
  DP_CHECK(st.recorded, ValueError, "GradScaler::step: no inf checks were recorded for this optimizer (none of its parameters has a gradient).");
  Tensor ret;
  if (!st.found_inf) ret = optimizer.step();
  st.stage = Stage::Stepped;
  return ret;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!enabled_) return;
  check_initialized("update");
  if (new_scale) {
    check_scale("new_scale", *new_scale);
    scale_ = static_cast<float>(*new_scale);
  } else {
    bool recorded = false, found_inf = false;
    for (const auto& [opt, st] : per_optimizer_) {
      recorded = recorded || st.recorded;
      found_inf = found_inf || (st.recorded && st.found_inf);
    }
    DP_CHECK(recorded, ValueError, "GradScaler::update: no inf checks were recorded prior to update().");
    // _amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu): float32 scale, double factors.
    if (found_inf) {
      scale_ = static_cast<float>(static_cast<double>(scale_) * backoff_factor_);
      growth_tracker_ = 0;
    } else {
      const int32_t successful = growth_tracker_ + 1;
      if (successful == growth_interval_) {
        const float grown = static_cast<float>(static_cast<double>(scale_) * growth_factor_);
        if (std::isfinite(grown)) scale_ = grown;
        growth_tracker_ = 0;
      } else {
        growth_tracker_ = successful;
      }
    }
  }
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return initialized_ ? static_cast<double>(scale_) : init_scale_;
}

void GradScaler::set_growth_factor(double v) {
  check_growth_factor(v);
  growth_factor_ = v;
}
void GradScaler::set_backoff_factor(double v) {
  check_backoff_factor(v);
  backoff_factor_ = v;
}
void GradScaler::set_growth_interval(int64_t v) {
  check_growth_interval(v);
  growth_interval_ = v;
}

GradScalerState GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {{"scale", get_scale()},
          {"growth_factor", growth_factor_},
          {"backoff_factor", backoff_factor_},
          {"growth_interval", static_cast<double>(growth_interval_)},
          {"_growth_tracker", static_cast<double>(growth_tracker_)}};
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  if (!enabled_) return;
  DP_CHECK(!state.empty(), ValueError,
           "GradScaler::load_state_dict: the source state dict is empty, possibly because it was saved from a disabled GradScaler.");
  auto get = [&](const char* key) {
    auto it = state.find(key);
    DP_CHECK(it != state.end(), ValueError, "GradScaler::load_state_dict: the state has no \"", key, "\"");
    return it->second;
  };
  const double scale = get("scale"), growth = get("growth_factor"), backoff = get("backoff_factor");
  const double interval = get("growth_interval"), tracker = get("_growth_tracker");
  check_scale("scale", scale);
  check_growth_factor(growth);
  check_backoff_factor(backoff);
  DP_CHECK(interval == std::floor(interval), ValueError, "GradScaler::load_state_dict: growth_interval must be an integer, got ", interval);
  check_growth_interval(static_cast<int64_t>(interval));
  DP_CHECK(tracker == std::floor(tracker) && tracker >= 0 && tracker < interval, ValueError,
           "GradScaler::load_state_dict: _growth_tracker must be an integer in [0, growth_interval), got ", tracker);
  init_scale_ = scale;
  scale_ = static_cast<float>(scale);
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = static_cast<int64_t>(interval);
  growth_tracker_ = static_cast<int32_t>(tracker);
}

}  // namespace dp::amp
