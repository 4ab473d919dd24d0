// torch.optim.lr_scheduler (1.13): _LRScheduler.step and state_dict, the schedulers' get_lr, with
// the same floating-point expressions so the rates match PyTorch's exactly.
// Floating-point contraction off for this file (GCC contracts a * b + c into an FMA by default in
// C++, even with -std=c++20): every rounding here must be the one PyTorch does, and the FMAs
// PyTorch does are written out. Before the includes, so inlined helpers compile the same way.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif
#include "dp/optim/lr_scheduler.h"
#include <algorithm>
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
  DP_CHECK(optimizer_.param_groups().size() == base_lrs_.size(), ValueError, "LRScheduler.step: the optimizer has ", optimizer_.param_groups().size(),
           " param groups but the scheduler was made for ", base_lrs_.size());
  ++step_count_;
  ++last_epoch_;
  std::vector<double> lrs = get_lr();
  for (size_t i = 0; i < lrs.size(); ++i) optimizer_.param_groups()[i].options().set_lr(lrs[i]);
  last_lrs_ = current_lrs();
}

LRSchedulerState LRScheduler::state_dict() const { return {last_epoch_, step_count_, base_lrs_, last_lrs_, name(), settings()}; }

void LRScheduler::check_state_dict(const LRSchedulerState& state) const {
  const std::string ctx = ::dp::detail::str(name(), ".load_state_dict");
  DP_CHECK(state.scheduler.empty() || state.scheduler == name(), ValueError, ctx, ": the state was saved by a ", state.scheduler.substr(0, 100),
           ", not a ", name());
  const size_t n = optimizer_.param_groups().size();
  DP_CHECK(state.base_lrs.size() == n && state.last_lrs.size() == n, ValueError, ctx, ": the state is for ", state.base_lrs.size(), " param groups (",
           state.last_lrs.size(), " last rates) but the optimizer has ", n);
  DP_CHECK(state.last_epoch >= -1 && state.step_count >= 0, ValueError, ctx, ": bad last_epoch ", state.last_epoch, " / step_count ",
           state.step_count);
  for (size_t i = 0; i < n; ++i)
    DP_CHECK(std::isfinite(state.base_lrs[i]) && std::isfinite(state.last_lrs[i]), ValueError, ctx, ": param group ", i,
             " has a non-finite rate (base ", state.base_lrs[i], ", last ", state.last_lrs[i], ")");
  // apply = false only reads: the const_cast changes nothing.
  if (!state.scheduler.empty()) const_cast<LRScheduler*>(this)->load_settings(state.settings, /*apply=*/false);
}

void LRScheduler::load_state_dict(const LRSchedulerState& state) {
  check_state_dict(state);
  if (!state.scheduler.empty()) load_settings(state.settings, /*apply=*/true);
  last_epoch_ = state.last_epoch;
  step_count_ = state.step_count;
  base_lrs_ = state.base_lrs;
  last_lrs_ = state.last_lrs;
  for (size_t i = 0; i < last_lrs_.size(); ++i) optimizer_.param_groups()[i].options().set_lr(last_lrs_[i]);
}

double LRScheduler::number_setting(const Settings& settings, const char* key) const {
  auto it = settings.find(key);
  DP_CHECK(it != settings.end(), ValueError, name(), ".load_state_dict: the state has no '", key, "' setting");
  DP_CHECK(it->second.size() == 1 && std::isfinite(it->second[0]), ValueError, name(), ".load_state_dict: setting '", key,
           "' must be one finite number, got ", it->second.size(), " value(s)",
           it->second.empty() ? "" : ::dp::detail::str(" starting ", it->second[0]));
  return it->second[0];
}

int64_t LRScheduler::integer_setting(const Settings& settings, const char* key, int64_t min_value) const {
  const double v = number_setting(settings, key);
  DP_CHECK(v == std::floor(v) && v >= static_cast<double>(min_value) && v < 9.0e15, ValueError, name(), ".load_state_dict: setting '", key,
           "' must be an integer >= ", min_value, ", got ", v);
  return static_cast<int64_t>(v);
}

// ---------------------------------------------------------------- StepLR

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma) : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  DP_CHECK(step_size >= 1, ValueError, "StepLR: step_size must be >= 1, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

LRScheduler::Settings StepLR::settings() const { return {{"step_size", {static_cast<double>(step_size_)}}, {"gamma", {gamma_}}}; }

void StepLR::load_settings(const Settings& s, bool apply) {
  const int64_t step_size = integer_setting(s, "step_size", 1);
  const double gamma = number_setting(s, "gamma");
  if (apply) step_size_ = step_size, gamma_ = gamma;
}

// ---------------------------------------------------------------- MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  // PyTorch: lr * gamma ** milestones[last_epoch] (a Counter), when last_epoch is a milestone.
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return lrs;
  const double factor = std::pow(gamma_, static_cast<double>(count));
  for (double& lr : lrs) lr = lr * factor;
  return lrs;
}

LRScheduler::Settings MultiStepLR::settings() const {
  return {{"milestones", std::vector<double>(milestones_.begin(), milestones_.end())}, {"gamma", {gamma_}}};
}

void MultiStepLR::load_settings(const Settings& s, bool apply) {
  auto it = s.find("milestones");
  DP_CHECK(it != s.end(), ValueError, name(), ".load_state_dict: the state has no 'milestones' setting");
  std::vector<int64_t> milestones;
  for (double v : it->second) {
    DP_CHECK(v == std::floor(v) && std::fabs(v) < 9.0e15, ValueError, name(), ".load_state_dict: milestone ", v, " is not an integer");
    milestones.push_back(static_cast<int64_t>(v));
  }
  std::sort(milestones.begin(), milestones.end());
  const double gamma = number_setting(s, "gamma");
  if (apply) milestones_ = std::move(milestones), gamma_ = gamma;
}

// ---------------------------------------------------------------- ExponentialLR

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) { initial_step(); }

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

LRScheduler::Settings ExponentialLR::settings() const { return {{"gamma", {gamma_}}}; }

void ExponentialLR::load_settings(const Settings& s, bool apply) {
  const double gamma = number_setting(s, "gamma");
  if (apply) gamma_ = gamma;
}

// ---------------------------------------------------------------- LinearLR

namespace {
void check_linear_factors(const char* ctx, double start_factor, double end_factor, int64_t total_iters) {
  DP_CHECK(start_factor > 0 && start_factor <= 1.0, ValueError, ctx,
           ": Starting multiplicative factor expected to be greater than 0 and less or equal to 1, got ", start_factor);
  DP_CHECK(end_factor >= 0 && end_factor <= 1.0, ValueError, ctx, ": Ending multiplicative factor expected to be between 0 and 1, got ", end_factor);
  DP_CHECK(total_iters >= 0, ValueError, ctx, ": total_iters must be >= 0, got ", total_iters);
}
}  // namespace

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  check_linear_factors("LinearLR", start_factor, end_factor, total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr = lr * start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double d = end_factor_ - start_factor_;
  const double factor = 1. + d / (static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(last_epoch_ - 1) * d);
  for (double& lr : lrs) lr = lr * factor;
  return lrs;
}

LRScheduler::Settings LinearLR::settings() const {
  return {{"start_factor", {start_factor_}}, {"end_factor", {end_factor_}}, {"total_iters", {static_cast<double>(total_iters_)}}};
}

void LinearLR::load_settings(const Settings& s, bool apply) {
  const double start_factor = number_setting(s, "start_factor"), end_factor = number_setting(s, "end_factor");
  const int64_t total_iters = integer_setting(s, "total_iters", 0);
  check_linear_factors("LinearLR.load_state_dict", start_factor, end_factor, total_iters);
  if (apply) start_factor_ = start_factor, end_factor_ = end_factor, total_iters_ = total_iters;
}

// ---------------------------------------------------------------- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min) : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
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
    for (size_t i = 0; i < lrs.size(); ++i) lrs[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * pi / T)) / 2;
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

LRScheduler::Settings CosineAnnealingLR::settings() const { return {{"T_max", {static_cast<double>(T_max_)}}, {"eta_min", {eta_min_}}}; }

void CosineAnnealingLR::load_settings(const Settings& s, bool apply) {
  const int64_t T_max = integer_setting(s, "T_max", 1);
  const double eta_min = number_setting(s, "eta_min");
  if (apply) T_max_ = T_max, eta_min_ = eta_min;
}

}  // namespace dp::optim
