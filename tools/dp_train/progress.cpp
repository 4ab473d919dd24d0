#include "progress.h"

#include <unistd.h>
#include <cmath>
#include <cstdio>

namespace dp::train {
namespace {

std::string printf_string(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string bar(int64_t done, int64_t total, int width) {
  const int full = total > 0 ? static_cast<int>(static_cast<double>(width) * static_cast<double>(done) / static_cast<double>(total)) : 0;
  std::string s = "[";
  for (int i = 0; i < width; ++i) s += i < full ? '=' : (i == full ? '>' : ' ');
  return s + "]";
}

}  // namespace

ProgressMode progress_mode(const std::string& option) {
  if (option == "bar") return ProgressMode::Bar;
  if (option == "lines") return ProgressMode::Lines;
  if (option == "none") return ProgressMode::None;
  return ::isatty(STDOUT_FILENO) ? ProgressMode::Bar : ProgressMode::Lines;
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
  const std::string stats = printf_string("loss %.4f  lr %.3g  %.0f samples/s  ETA %s", r.loss, r.lr, r.samples_per_s,
                                          format_duration(r.eta_s).c_str());
  if (mode_ == ProgressMode::Lines) {
    if (r.step % every_ != 0 && r.step != r.total_steps && r.batch != r.batches) return;
    std::printf("epoch %lld/%lld  batch %lld/%lld  step %lld/%lld  %s\n", static_cast<long long>(r.epoch), static_cast<long long>(r.epochs),
                static_cast<long long>(r.batch), static_cast<long long>(r.batches), static_cast<long long>(r.step),
                static_cast<long long>(r.total_steps), stats.c_str());
    std::fflush(stdout);
    return;
  }
  // Redrawing a terminal line costs more than a tiny model's step: at most 20 redraws a second,
  // but always the epoch's last batch, so the final state stays on screen.
  const auto now = std::chrono::steady_clock::now();
  if (bar_open_ && now - last_draw_ < std::chrono::milliseconds(50) && r.batch != r.batches && r.step != r.total_steps) return;
  last_draw_ = now;
  std::printf("\r\x1b[Kepoch %lld/%lld %s %lld/%lld  step %lld/%lld  %s", static_cast<long long>(r.epoch), static_cast<long long>(r.epochs),
              bar(r.batch, r.batches, 24).c_str(), static_cast<long long>(r.batch), static_cast<long long>(r.batches),
              static_cast<long long>(r.step), static_cast<long long>(r.total_steps), stats.c_str());
  std::fflush(stdout);
  bar_open_ = true;
}

void Progress::line(const std::string& text) {
  end_bar();
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
