// torch.optim.lr_scheduler (1.13): _LRScheduler.step, StepLR.get_lr, CosineAnnealingLR.get_lr,
// with the same floating-point expressions so the rates match PyTorch's exactly.
// Floating-point contraction off for this file (GCC contracts a * b + c into an FMA by default in
// C++, even with -std=c++20): every rounding here must be the one PyTorch does, and the FMAs
// PyTorch does are written out. Before the includes, so inlined helpers compile the same way.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif
#include "dp/optim/lr_scheduler.h"
#include <cmath>
#include <numbers>

namespace dp::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lrs_(current_lrs()) {}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> lrs;
  for (const auto& g : optimizer_.param_groups()) lrs.push_back(g.options().get_lr());
  return lrs;
}

void LRScheduler::step() {
  DP_CHECK(optimizer_.param_groups().size() == base_lrs_.size(), ValueError, "LRScheduler.step: the optimizer has ",
           optimizer_.param_groups().size(), " param groups but the scheduler was made for ", base_lrs_.size());
  ++step_count_;
  ++last_epoch_;
  std::vector<double> lrs = get_lr();
  for (size_t i = 0; i < lrs.size(); ++i) optimizer_.param_groups()[i].options().set_lr(lrs[i]);
  last_lrs_ = current_lrs();
}

LRSchedulerState LRScheduler::state() const { return {last_epoch_, step_count_, base_lrs_, last_lrs_}; }

void LRScheduler::load_state(const LRSchedulerState& state) {
  const size_t n = optimizer_.param_groups().size();
  DP_CHECK(state.base_lrs.size() == n && state.last_lrs.size() == n, ValueError, "LRScheduler.load_state: the state is for ",
           state.base_lrs.size(), " param groups (", state.last_lrs.size(), " last rates) but the optimizer has ", n);
  DP_CHECK(state.last_epoch >= -1 && state.step_count >= 0, ValueError, "LRScheduler.load_state: bad last_epoch ",
           state.last_epoch, " / step_count ", state.step_count);
  last_epoch_ = state.last_epoch;
  step_count_ = state.step_count;
  base_lrs_ = state.base_lrs;
  last_lrs_ = state.last_lrs;
  for (size_t i = 0; i < n; ++i) optimizer_.param_groups()[i].options().set_lr(last_lrs_[i]);
}

// ---------------------------------------------------------------- StepLR

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  DP_CHECK(step_size >= 1, ValueError, "StepLR: step_size must be >= 1, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

// ---------------------------------------------------------------- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  DP_CHECK(T_max >= 1, ValueError, "CosineAnnealingLR: T_max must be >= 1, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  constexpr double pi = std::numbers::pi;  // == math.pi
  const double T = static_cast<double>(T_max_);
  const double e = static_cast<double>(last_epoch_);
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * pi / T)) / 2;
    return lrs;
  }
  // Python's % is a floor modulo; last_epoch - 1 - T_max can be negative.
  const int64_t period = 2 * T_max_;
  const int64_t r = ((last_epoch_ - 1 - T_max_) % period + period) % period;
  if (r == 0) {
    for (size_t i = 0; i < lrs.size(); ++i) lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(pi / T)) / 2;
    return lrs;
  }
  for (double& lr : lrs) lr = (1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (lr - eta_min_) + eta_min_;
  return lrs;
}

}  // namespace dp::optim
