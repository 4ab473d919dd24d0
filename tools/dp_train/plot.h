#pragma once
// The run's curves as a hand-written SVG, two panels side by side: training loss per step (raw,
// faint, and a moving average) with the test loss at each evaluation; and test accuracy at each
// evaluation. Both x axes count steps, so a run of an epoch or less shows its evaluations where
// they happened, with a dashed line marking each epoch's end (every 2nd, 5th, ... when there are
// many). The loss axis starts at 0 and covers every plotted loss, the first steps' included; the
// accuracy axis covers the accuracies measured (and the target). Ticks are round values (1, 2,
// 2.5, 5 x 10^k). Series carry class names (train-loss, train-loss-mean, test-loss, accuracy).
#include <cstdint>
#include <string>
#include "checkpoint.h"

namespace dp::train {

struct PlotInput {
  std::string title;                             // one line above the panels
  std::string loss_name = "loss";                // the loss panel's y label ("cross-entropy")
  std::string accuracy_title = "Test accuracy";  // the accuracy panel's title
  std::string test_name = "test";                // the evaluation set in legends ("test loss")
  double target_accuracy = -1;                   // >= 0: a dashed line at this accuracy (--min-accuracy)
  const History* history = nullptr;
  int64_t steps_per_epoch = 1;
};

// The SVG document.
std::string render_plot(const PlotInput& in);
// Writes it (temporary file, then rename, like the checkpoints); IOError naming the path.
void write_plot(const std::string& path, const PlotInput& in);

}  // namespace dp::train
