#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace dp::train {
namespace {

std::string printf_string(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// "[=====>    ]" with `width` characters between the brackets, `fraction` of them filled.
std::string bar(double fraction, int width) {
  const int full = static_cast<int>(std::floor(static_cast<double>(width) * std::clamp(fraction, 0.0, 1.0)));
  std::string s = "[";
  for (int i = 0; i < width; ++i) s += i < full ? '=' : (i == full ? '>' : ' ');
  return s + "]";
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

constexpr int kMinBar = 10, kMaxBar = 40;  // characters between the brackets

}  // namespace

ProgressMode progress_mode(const std::string& option) {
  if (option == "bar") return ProgressMode::Bar;
  if (option == "lines") return ProgressMode::Lines;
  if (option == "none") return ProgressMode::None;
  return ::isatty(STDOUT_FILENO) ? ProgressMode::Bar : ProgressMode::Lines;
}

int terminal_columns() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int v = std::atoi(c);
    if (v > 0) return v;
  }
  return 80;
}

std::string bar_line(const StepReport& r, int columns) {
  const size_t limit = static_cast<size_t>(std::max(columns - 1, 1));
  const double fraction = r.total_steps > 0 ? static_cast<double>(r.step) / static_cast<double>(r.total_steps) : 0;
  // Whole percents, rounded down: 100% only when the run is complete.
  const std::string pct = printf_string("%3d%%", static_cast<int>(std::floor(std::clamp(fraction, 0.0, 1.0) * 100)));
  const std::string epoch = printf_string("epoch %lld/%lld", static_cast<long long>(r.epoch), static_cast<long long>(r.epochs));
  const std::string step = printf_string("step %lld/%lld", static_cast<long long>(r.step), static_cast<long long>(r.total_steps));
  const std::string batch = printf_string("batch %lld/%lld", static_cast<long long>(r.batch), static_cast<long long>(r.batches));
  const std::string loss = printf_string("loss %.4f", r.loss);
  const std::string lr = printf_string("lr %.3g", r.lr);
  const std::string rate = printf_string("%.0f samples/s", r.samples_per_s);
  const std::string eta = "ETA " + format_duration(r.eta_s);

  // From the richest layout to the barest; the first that leaves room for a bar of kMinBar wins.
  struct Layout {
    bool epoch, batch, lr, rate;
  };
  for (const Layout l : {Layout{true, true, true, true}, Layout{true, true, false, true}, Layout{true, false, false, true},
                         Layout{true, false, false, false}, Layout{false, false, false, false}}) {
    std::vector<std::string> after{pct, step};
    if (l.batch) after.push_back(batch);
    after.push_back(loss);
    if (l.lr) after.push_back(lr);
    if (l.rate) after.push_back(rate);
    after.push_back(eta);
    const std::string head = l.epoch ? epoch + "  " : "";
    const std::string tail = "  " + join(after, "  ");
    const size_t fixed = head.size() + 2 + tail.size();  // 2: the brackets
    if (fixed + kMinBar > limit) continue;
    const int width = static_cast<int>(std::min<size_t>(kMaxBar, limit - fixed));
    return head + bar(fraction, width) + tail;
  }
  std::string s = join({step, loss, eta}, " ");
  if (s.size() > limit) s.resize(limit);
  return s;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 1) return printf_string("%.0fms", s * 1000);
  if (s < 10) return printf_string("%.1fs", s);
  const long t = std::lround(s);
  if (t < 60) return printf_string("%lds", t);
  if (t < 3600) return printf_string("%ldm%02lds", t / 60, t % 60);
  return printf_string("%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

void Progress::step(const StepReport& r) {
  if (mode_ == ProgressMode::None) return;
  if (mode_ == ProgressMode::Lines) {
    if (r.step % every_ != 0 && r.step != r.total_steps && r.batch != r.batches) return;
    std::printf("epoch %lld/%lld  batch %lld/%lld  step %lld/%lld  loss %.4f  lr %.3g  %.0f samples/s  ETA %s\n", static_cast<long long>(r.epoch),
                static_cast<long long>(r.epochs), static_cast<long long>(r.batch), static_cast<long long>(r.batches), static_cast<long long>(r.step),
                static_cast<long long>(r.total_steps), r.loss, r.lr, r.samples_per_s, format_duration(r.eta_s).c_str());
    std::fflush(stdout);
    return;
  }
  // Redrawing a terminal line costs more than a tiny model's step: at most 20 redraws a second,
  // but always an epoch's last batch and the run's last step. The last step's bar stays on screen.
  last_ = r;
  const bool last_step = r.step >= r.total_steps;
  const auto now = std::chrono::steady_clock::now();
  if (bar_open_ && !last_step && r.batch != r.batches && now - last_draw_ < std::chrono::milliseconds(50)) return;
  draw();
  if (last_step) end_bar();
}

std::string Progress::clear_bar(int columns) const {
  // \r to the line's start, ESC[K clears it: the bar was shorter than the terminal, so it never
  // wrapped and this is all there is to clear. But when the window narrowed since the bar was
  // drawn, a terminal that reflows its lines (tmux, VTE, konsole, kitty, iTerm2, Windows
  // Terminal; not xterm) has wrapped it over several rows, the cursor on the last: go up to the
  // first and clear to the end of the screen.
  if (bar_open_ && columns < drawn_columns_ && drawn_length_ >= static_cast<size_t>(columns)) {
    const size_t rows = (drawn_length_ + static_cast<size_t>(columns) - 1) / static_cast<size_t>(columns);
    if (rows > 1) return "\r\x1b[" + std::to_string(rows - 1) + "A\x1b[J";
  }
  return "\r\x1b[K";
}

void Progress::draw() {
  last_draw_ = std::chrono::steady_clock::now();
  const int columns = terminal_columns();
  const std::string text = bar_line(last_, columns);
  std::printf("%s%s", clear_bar(columns).c_str(), text.c_str());
  std::fflush(stdout);
  bar_open_ = true;
  drawn_columns_ = columns;
  drawn_length_ = text.size();
}

void Progress::line(const std::string& text) {
  if (bar_open_ && mode_ == ProgressMode::Bar) {
    // In place of the bar, which is drawn again below it.
    std::printf("%s%s\n", clear_bar(terminal_columns()).c_str(), text.c_str());
    drawn_columns_ = 0;  // the bar is gone: nothing wrapped to clear
    draw();
    return;
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void Progress::end_bar() {
  if (!bar_open_) return;
  std::printf("\n");
  std::fflush(stdout);
  bar_open_ = false;
}

}  // namespace dp::train
