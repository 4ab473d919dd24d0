#pragma once
// What a person watching the run sees on stdout: on a terminal one progress line redrawn in place
// (a bar over the whole run, steps, loss, samples/s, ETA); otherwise (a pipe, a file, CI) plain
// lines, one per step or per --log-every steps, so a log shows every step without carriage returns.
//
// The bar line is fitted to the terminal's width, read (ioctl TIOCGWINSZ on stdout) at every
// redraw, so a resized window is followed at the next redraw: it is never longer than the width
// minus one column, so the terminal never wraps it and each redraw (\r, then ESC[K to clear)
// replaces the previous one. After the window narrowed below the last bar's length, the rows a
// reflowing terminal wrapped it over are cleared too. Narrow terminals drop the least useful fields first (lr, samples/s,
// batch, epoch). Lines printed while the bar is shown (an epoch's evaluation) go above it and the
// bar is redrawn below them; the bar of the run's last step stays on screen.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dp::train {

struct StepReport {
  int64_t epoch = 0, epochs = 0;      // 1-based epoch of the step, epochs in the run
  int64_t batch = 0, batches = 0;     // 1-based batch within its epoch, batches in that epoch
  int64_t step = 0, total_steps = 0;  // global step just done (1-based), steps in the run
  double loss = 0, lr = 0;
  double samples_per_s = 0;  // this invocation's training throughput
  double eta_s = 0;          // training time left at that rate
};

enum class ProgressMode { Bar, Lines, None };

// "auto" picks Bar when stdout is a terminal (isatty), else Lines.
ProgressMode progress_mode(const std::string& option);

// The width of the terminal on stdout in columns; when stdout is not a terminal (--progress bar
// into a file or a pipe), $COLUMNS, else 80.
int terminal_columns();

// The bar line for a step, at most columns - 1 characters (no control characters). The bar tracks
// the whole run (step / total_steps), also with --steps.
std::string bar_line(const StepReport& r, int columns);

class Progress {
 public:
  Progress(ProgressMode mode, int64_t every) : mode_(mode), every_(every) {}
  ~Progress() { end_bar(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void step(const StepReport& r);
  // A line of its own (an epoch's evaluation, a message). In bar mode it is printed above the
  // bar, which is redrawn below it. Printed also in None mode: only the per-step output is
  // silenced there.
  void line(const std::string& text);

 private:
  void draw();
  void end_bar();
  // What moves the cursor to the start of the bar and erases it, at the terminal's width now.
  std::string clear_bar(int columns) const;

  ProgressMode mode_;
  int64_t every_;
  bool bar_open_ = false;
  StepReport last_{};
  int drawn_columns_ = 0;    // the terminal's width when the bar was last drawn
  size_t drawn_length_ = 0;  // and the bar's length then
  std::chrono::steady_clock::time_point last_draw_{};
};

// "2h05m", "4m10s", "12s", "0.8s".
std::string format_duration(double seconds);

}  // namespace dp::train
