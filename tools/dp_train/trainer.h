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
// to float rounding only (tests/tools/test_dp_train_resume.cpp measures both).
//
// Across processes (the launcher's WORLD_SIZE > 1, or --distributed): every process runs this
// same loop with DistributedDataParallel around its DataParallel. The global batch of step k is the
// single-process batch of step k, each rank taking a contiguous share of it (data.h: rank_share;
// ragged when the rows do not divide evenly), and forward_loss makes the loss and gradient exactly
// those of the global batch, so the run is the one-process run up to float rounding (the same
// weights from --init with --no-shuffle on any number of processes). The position, optimizer state
// and history are the same on every rank and independent of the world size: a checkpoint resumes
// on any number of processes. Rank 0 alone prints, logs, plots and writes files (checkpoints and
// --save through dp::distributed::save_checkpoint, which checks that all ranks agree); evaluation
// counts every test row once over the ranks; a stop (signal or --stop-after on any rank) is agreed
// on after every step, so all ranks stop after the same step.
#include <memory>
#include <stdexcept>
#include "args.h"

namespace dp::train {

// A problem found before the first step (devices, data set, --init file, checkpoint; across
// processes also on another rank): reported as a usage error, exit status 2. The constructor throws
// a dp::distributed::DistributedError when the process group fails (exit status 3).
struct SetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  explicit Trainer(Options options);  // throws SetupError
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains; returns the exit status (0, 1 below --min-accuracy, 130/143 stopped by a signal). Errors
  // during training are thrown (dp::distributed::DistributedError for a lost peer or a timeout).
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dp::train
