#pragma once
// One dp-train run: set up (devices, data, model, optimizer, schedule, and the checkpoint or --init
// weights it starts from), then train step by step with DataParallel, evaluating on the test set
// and checkpointing at every epoch end, until the run's length is reached or a stop is asked for.
//
// Reproducibility: the numbers depend only on the RunSettings and the device list. The data order
// is a function of (seed, epoch) (data.h), every other random draw is made before the first step,
// and DataParallel sums the replicas' gradients in a fixed order, so a run interrupted and resumed
// on the same devices ends on bit-identical weights. Resumed on a different number of devices,
// each batch is split differently and the gradient sums round differently: the weights then agree
// to float rounding only (tests/tools/test_dp_train.cpp measures both).
#include <memory>
#include <stdexcept>
#include "args.h"

namespace dp::train {

// A problem found before the first step (devices, data set, --init file, checkpoint): reported as
// a usage error, exit status 2.
struct SetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  explicit Trainer(Options options);  // throws SetupError
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains; returns the exit status (0, 1 below --min-accuracy, 130 stopped by a signal). Errors
  // during training are thrown.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dp::train
