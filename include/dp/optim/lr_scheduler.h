#pragma once
// Learning-rate schedulers (torch.optim.lr_scheduler, 1.13 semantics). Construction performs
// PyTorch's initial step (last_epoch -1 -> 0; rates unchanged, except LinearLR's start factor);
// each step() then advances last_epoch by one and writes the new rate into every param group. Call
// it after optimizer.step(), as in PyTorch. Rates are computed recursively from the groups' current
// rates (PyTorch's chainable form), so they equal PyTorch's value for value.
//
// Saving and resuming (PyTorch's scheduler.state_dict() / load_state_dict()): state_dict() holds
// the position (last_epoch, the step count), the base and last rates and the scheduler's own
// settings; a scheduler made again for the same optimizer and given it continues exactly where the
// saved one was. dp/optim/serialize.h stores it in the optimizer's checkpoint:
//
//   dp::save(optimizer, scheduler, "optim.safetensors");
//   ...                                                  // a new process
//   dp::optim::SGD optimizer(model->parameters(), dp::optim::SGDOptions(0.1));
//   dp::optim::StepLR scheduler(optimizer, 30);
//   dp::load(optimizer, scheduler, "optim.safetensors");  // both resume
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include "dp/optim/optimizer.h"

namespace dp::optim {

// Everything a scheduler needs to resume (torch's scheduler state_dict).
struct LRSchedulerState {
  int64_t last_epoch = -1;
  int64_t step_count = 0;        // step() calls, the initial one included
  std::vector<double> base_lrs;  // the groups' learning rates when the scheduler was made
  std::vector<double> last_lrs;  // what get_last_lr() returns
  // The scheduler's class ("StepLR", ...) and its settings by name, each a list of numbers
  // ({"step_size": {30}, "gamma": {0.1}}, {"milestones": {30, 80}, ...}). As PyTorch's
  // load_state_dict, loading adopts the saved settings. A state with no scheduler name (the four
  // fields above only) loads the position and rates and keeps the scheduler's own settings.
  std::string scheduler;
  std::map<std::string, std::vector<double>> settings;
};

// The state as JSON text (how dp::save stores it; numbers round-trip exactly), and back. Reading
// checks every field's type and throws ValueError naming the field ("lr_scheduler.base_lrs[1]").
std::string lr_scheduler_state_to_json(const LRSchedulerState& state);
LRSchedulerState lr_scheduler_state_from_json(const std::string& text);

// Holds a reference to the optimizer, which must outlive the scheduler.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();
  // The learning rate of each group after the last step().
  const std::vector<double>& get_last_lr() const { return last_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // "StepLR", "CosineAnnealingLR", ...: PyTorch's class name.
  virtual const char* name() const = 0;

  LRSchedulerState state_dict() const;
  // Resumes from a saved state: the position, the base and last rates, and (when the state names a
  // scheduler) the settings; the groups' learning rates are set to state.last_lrs. Throws
  // ValueError, changing nothing, when the state is another scheduler's, is for another number of
  // param groups, or has a missing or bad setting.
  void load_state_dict(const LRSchedulerState& state);
  // The checks of load_state_dict alone (what dp::load runs before changing anything).
  void check_state_dict(const LRSchedulerState& state) const;
  // Earlier names of state_dict / load_state_dict.
  LRSchedulerState state() const { return state_dict(); }
  void load_state(const LRSchedulerState& state) { load_state_dict(state); }

 protected:
  using Settings = std::map<std::string, std::vector<double>>;
  // The rates for last_epoch_ (already advanced), computed from the groups' current rates.
  virtual std::vector<double> get_lr() = 0;
  // The scheduler's settings by name, for state_dict().
  virtual Settings settings() const = 0;
  // Checks saved settings (ValueError naming the scheduler and the setting) and, with apply, adopts
  // them; all checks come before any change.
  virtual void load_settings(const Settings& settings, bool apply) = 0;
  // Subclass constructors call this last (PyTorch's constructor-time step).
  void initial_step() { step(); }
  std::vector<double> current_lrs() const;

  // Helpers for load_settings: the one number of setting `key` (ValueError naming it when absent
  // or not a single number), and the same as an integer >= min_value.
  double number_setting(const Settings& settings, const char* key) const;
  int64_t integer_setting(const Settings& settings, const char* key, int64_t min_value) const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
};

// lr *= gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  int64_t step_size() const { return step_size_; }
  double gamma() const { return gamma_; }
  const char* name() const override { return "StepLR"; }

 protected:
  std::vector<double> get_lr() override;
  Settings settings() const override;
  void load_settings(const Settings& settings, bool apply) override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr *= gamma at each milestone epoch (a milestone listed twice multiplies by gamma^2 there).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  // Sorted, repeats kept.
  const std::vector<int64_t>& milestones() const { return milestones_; }
  double gamma() const { return gamma_; }
  const char* name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> get_lr() override;
  Settings settings() const override;
  void load_settings(const Settings& settings, bool apply) override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr *= gamma every epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  double gamma() const { return gamma_; }
  const char* name() const override { return "ExponentialLR"; }

 protected:
  std::vector<double> get_lr() override;
  Settings settings() const override;
  void load_settings(const Settings& settings, bool apply) override;

 private:
  double gamma_;
};

// Linear warm-up (or decay): the rate goes from start_factor * base to end_factor * base over
// total_iters epochs, then stays. Unlike the others it changes the rates at construction (to
// start_factor * base), as PyTorch's does. start_factor in (0, 1], end_factor in [0, 1].
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double start_factor() const { return start_factor_; }
  double end_factor() const { return end_factor_; }
  int64_t total_iters() const { return total_iters_; }
  const char* name() const override { return "LinearLR"; }

 protected:
  std::vector<double> get_lr() override;
  Settings settings() const override;
  void load_settings(const Settings& settings, bool apply) override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

// Cosine annealing from the base rate to eta_min over T_max epochs (and back, periodically).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  int64_t T_max() const { return T_max_; }
  double eta_min() const { return eta_min_; }
  const char* name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> get_lr() override;
  Settings settings() const override;
  void load_settings(const Settings& settings, bool apply) override;

 private:
  int64_t T_max_;
  double eta_min_;
};

}  // namespace dp::optim
