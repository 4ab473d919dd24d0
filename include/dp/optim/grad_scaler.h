#pragma once
// Gradient scaling for mixed-precision training, as PyTorch 1.13's torch.cuda.amp.GradScaler.
//
//   dp::amp::GradScaler scaler;                     // init_scale 2^16, growth 2, backoff 0.5, interval 2000
//   for (...) {
//     optimizer.zero_grad();
//     Tensor loss;
//     { dp::AutocastGuard ac(dp::DeviceType::CUDA); loss = criterion(model->forward(x), y); }
//     scaler.scale(loss).backward();                // gradients of loss * scale
//     scaler.unscale_(optimizer);                   // optional: before clipping gradients
//     scaler.step(optimizer);                       // skipped when a gradient is inf or nan
//     scaler.update();                              // backoff after a skip, growth after `interval` good steps
//   }
//
// The scale is a float32 tensor of shape [1] on the device of the first tensor scaled, so a
// scaled 0-dim loss has shape [1] and a float16/bfloat16 loss becomes float32 (PyTorch's type
// promotion does the same). Unlike PyTorch 1.13, which disables itself without CUDA, it works on
// any device, the CPU included (float16 gradients are refused by unscale_, as in PyTorch).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>
#include "dp/core/tensor.h"
#include "dp/optim/optimizer.h"

namespace dp::amp {

struct GradScalerOptions {
  GradScalerOptions& init_scale(double v) {
    init_scale_ = v;
    return *this;
  }
  GradScalerOptions& growth_factor(double v) {
    growth_factor_ = v;
    return *this;
  }
  GradScalerOptions& backoff_factor(double v) {
    backoff_factor_ = v;
    return *this;
  }
  GradScalerOptions& growth_interval(int64_t v) {
    growth_interval_ = v;
    return *this;
  }
  GradScalerOptions& enabled(bool v) {
    enabled_ = v;
    return *this;
  }
  double init_scale_ = 65536.0;
  double growth_factor_ = 2.0;
  double backoff_factor_ = 0.5;
  int64_t growth_interval_ = 2000;
  bool enabled_ = true;
};

// PyTorch's GradScaler.state_dict(): {"scale", "growth_factor", "backoff_factor", "growth_interval",
// "_growth_tracker"}; empty for a disabled scaler.
using GradScalerState = std::map<std::string, double>;

class GradScaler {
 public:
  // Throws ValueError for growth_factor <= 1 or backoff_factor >= 1 (PyTorch asserts both), and
  // for backoff_factor <= 0, growth_interval <= 0 or a non-positive or non-finite init_scale
  // (PyTorch takes those, and its scale then never settles). The setters check the same.
  explicit GradScaler(GradScalerOptions options = {});

  // outputs * scale (returned unchanged when disabled). The first call places the scale on the
  // output's device.
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);

  // Divides the optimizer's gradients by the scale in place and records whether any was inf or
  // nan. At most once per optimizer between update()s, and not after step() (ValueError otherwise).
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ (if not done yet), then optimizer.step() unless a gradient was inf or nan. Returns
  // what optimizer.step() returned, or an undefined tensor when the step was skipped.
  Tensor step(optim::Optimizer& optimizer);
  // After the iteration's step()s: backoff (scale * backoff_factor, tracker reset) if any recorded
  // gradient was inf or nan, else tracker + 1, growing the scale by growth_factor when the tracker
  // reaches growth_interval (kept only if finite). new_scale instead sets the scale directly.
  void update(std::optional<double> new_scale = std::nullopt);

  // The current scale (init_scale before the first scale(); 1.0 when disabled).
  double get_scale() const;
  double get_growth_factor() const { return growth_factor_; }
  void set_growth_factor(double v);
  double get_backoff_factor() const { return backoff_factor_; }
  void set_backoff_factor(double v);
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_interval(int64_t v);
  int64_t get_growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return enabled_; }

  GradScalerState state_dict() const;
  // Throws ValueError (changing nothing) for an empty state (saved from a disabled scaler), a
  // missing key or a bad value.
  void load_state_dict(const GradScalerState& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    bool recorded = false;  // unscale_ ran: found_inf is meaningful
    bool found_inf = false;
  };
  void check_initialized(const char* fn) const;
  Tensor scale_on(Device device) const;

  double init_scale_;
  float scale_;  // float32, as PyTorch's scale tensor
  int32_t growth_tracker_ = 0;
  bool initialized_ = false;  // PyTorch's _scale is not None
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  bool enabled_;
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace dp::amp
