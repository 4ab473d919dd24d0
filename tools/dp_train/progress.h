#pragma once
// What a person watching the run sees on stdout: on a terminal one progress line redrawn in place
// (steps, samples/s, loss, ETA); otherwise (a pipe, a file, CI) plain lines, one per step or per
// --log-every steps, so a log shows every step without carriage returns.
#include <chrono>
#include <cstdint>
#include <string>

namespace dp::train {

struct StepReport {
  int64_t epoch = 0, epochs = 0;       // 1-based epoch of the step, epochs in the run
  int64_t batch = 0, batches = 0;      // 1-based batch within its epoch, batches in that epoch
  int64_t step = 0, total_steps = 0;   // global step just done (1-based), steps in the run
  double loss = 0, lr = 0;
  double samples_per_s = 0;            // this invocation's training throughput
  double eta_s = 0;                    // training time left at that rate
};

enum class ProgressMode { Bar, Lines, None };

// "auto" picks Bar when stdout is a terminal (isatty), else Lines.
ProgressMode progress_mode(const std::string& option);

class Progress {
 public:
  Progress(ProgressMode mode, int64_t every) : mode_(mode), every_(every) {}
  ~Progress() { end_bar(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void step(const StepReport& r);
  // A line of its own (an epoch's evaluation, a message): ends the bar line first. Printed also in
  // None mode: only the per-step output is silenced there.
  void line(const std::string& text);

 private:
  void end_bar();

  ProgressMode mode_;
  int64_t every_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// "2h05m", "4m10s", "12s", "0.8s".
std::string format_duration(double seconds);

}  // namespace dp::train
