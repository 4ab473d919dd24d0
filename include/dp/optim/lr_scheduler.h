#pragma once
// Learning-rate schedulers (torch.optim.lr_scheduler, 1.13 semantics). Construction performs
// PyTorch's initial step (last_epoch -1 -> 0, learning rates unchanged); each step() then advances
// last_epoch by one and writes the new rate into every param group. Call it after
// optimizer.step(), as in PyTorch. Rates are computed recursively from the groups' current rates
// (PyTorch's chainable form), so they equal PyTorch's value for value.
#include <cstdint>
#include <vector>
#include "dp/optim/optimizer.h"

namespace dp::optim {

// Everything a scheduler needs to resume (torch's scheduler state_dict, minus the constants).
struct LRSchedulerState {
  int64_t last_epoch = -1;
  int64_t step_count = 0;         // step() calls, the initial one included
  std::vector<double> base_lrs;   // the groups' learning rates when the scheduler was made
  std::vector<double> last_lrs;   // what get_last_lr() returns
};

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
  LRSchedulerState state() const;
  // Resumes from a saved state (checks its group count against the optimizer's); the groups'
  // learning rates are set to state.last_lrs.
  void load_state(const LRSchedulerState& state);

 protected:
  // The rates for last_epoch_ (already advanced), computed from the groups' current rates.
  virtual std::vector<double> get_lr() = 0;
  // Subclass constructors call this last (PyTorch's constructor-time step).
  void initial_step() { step(); }
  std::vector<double> current_lrs() const;

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

 protected:
  std::vector<double> get_lr() override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Cosine annealing from the base rate to eta_min over T_max epochs (and back, periodically).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  int64_t T_max() const { return T_max_; }
  double eta_min() const { return eta_min_; }

 protected:
  std::vector<double> get_lr() override;

 private:
  int64_t T_max_;
  double eta_min_;
};

}  // namespace dp::optim
