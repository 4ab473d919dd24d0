#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>
#include "dp/core/errors.h"

namespace dp::train {
namespace {

// Layout (px). Each panel: a plotting area with room left for tick labels, below for the x label.
constexpr double kWidth = 1000, kHeight = 430;
constexpr double kTop = 62, kPlotH = 300, kPlotW = 390;
constexpr double kPanelX[2] = {80, 580};
const char* kBlue = "#1f77b4";
const char* kOrange = "#e6550d";
const char* kGreen = "#2ca02c";

struct Point {
  double x, y;
};

std::string num(double v, int precision = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// Round tick steps (1, 2, 2.5, 5 x 10^k) giving about `target` ticks over [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 5) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

// Axis ranges widened to round tick values.
struct Range {
  double lo, hi;
};
Range nice_range(double lo, double hi) {
  if (!(hi > lo)) {
    lo -= 0.5;
    hi += 0.5;
  }
  const auto t = nice_ticks(lo, hi);
  const double step = t.size() > 1 ? t[1] - t[0] : 1;
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step};
}

class Panel {
 public:
  Panel(std::ostringstream& svg, int index, Range x, Range y) : svg_(svg), x0_(kPanelX[index]), x_(x), y_(y), id_(index) {}
  double px(double x) const { return x0_ + (x - x_.lo) / (x_.hi - x_.lo) * kPlotW; }
  double py(double y) const { return kTop + kPlotH - (y - y_.lo) / (y_.hi - y_.lo) * kPlotH; }

  void frame(const std::string& title, const std::string& xlabel, const std::string& ylabel) {
    svg_ << "<clipPath id=\"clip" << id_ << "\"><rect x=\"" << x0_ << "\" y=\"" << kTop << "\" width=\"" << kPlotW << "\" height=\"" << kPlotH
         << "\"/></clipPath>\n";
    svg_ << "<text x=\"" << x0_ + kPlotW / 2 << "\" y=\"" << kTop - 10 << "\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
         << escape(title) << "</text>\n";
    for (double t : nice_ticks(x_.lo, x_.hi)) {
      svg_ << "<line x1=\"" << px(t) << "\" y1=\"" << kTop << "\" x2=\"" << px(t) << "\" y2=\"" << kTop + kPlotH << "\" stroke=\"#e8e8e8\"/>\n";
      svg_ << "<line x1=\"" << px(t) << "\" y1=\"" << kTop + kPlotH << "\" x2=\"" << px(t) << "\" y2=\"" << kTop + kPlotH + 5
           << "\" stroke=\"#333\"/>\n";
      svg_ << "<text x=\"" << px(t) << "\" y=\"" << kTop + kPlotH + 20 << "\" text-anchor=\"middle\">" << num(t, 7) << "</text>\n";
    }
    for (double t : nice_ticks(y_.lo, y_.hi)) {
      svg_ << "<line x1=\"" << x0_ << "\" y1=\"" << py(t) << "\" x2=\"" << x0_ + kPlotW << "\" y2=\"" << py(t) << "\" stroke=\"#e8e8e8\"/>\n";
      svg_ << "<line x1=\"" << x0_ - 5 << "\" y1=\"" << py(t) << "\" x2=\"" << x0_ << "\" y2=\"" << py(t) << "\" stroke=\"#333\"/>\n";
      svg_ << "<text x=\"" << x0_ - 8 << "\" y=\"" << py(t) + 4 << "\" text-anchor=\"end\">" << num(t) << "</text>\n";
    }
    svg_ << "<rect x=\"" << x0_ << "\" y=\"" << kTop << "\" width=\"" << kPlotW << "\" height=\"" << kPlotH << "\" fill=\"none\" stroke=\"#333\"/>\n";
    svg_ << "<text x=\"" << x0_ + kPlotW / 2 << "\" y=\"" << kTop + kPlotH + 42 << "\" text-anchor=\"middle\">" << escape(xlabel) << "</text>\n";
    const double yl = x0_ - 52, ym = kTop + kPlotH / 2;
    svg_ << "<text x=\"" << yl << "\" y=\"" << ym << "\" text-anchor=\"middle\" transform=\"rotate(-90 " << yl << " " << ym << ")\">"
         << escape(ylabel) << "</text>\n";
  }

  // `cls` names the series (class="..."), for readers of the SVG and its tests.
  void polyline(const std::vector<Point>& pts, const char* cls, const char* color, double width, double opacity = 1) {
    if (pts.empty()) return;
    svg_ << "<polyline class=\"" << cls << "\" clip-path=\"url(#clip" << id_ << ")\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\""
         << width << "\" stroke-opacity=\"" << opacity << "\" stroke-linejoin=\"round\" points=\"";
    for (const Point& p : pts) svg_ << num(px(p.x), 6) << "," << num(py(p.y), 6) << " ";
    svg_ << "\"/>\n";
  }

  void markers(const std::vector<Point>& pts, const char* cls, const char* color) {
    for (const Point& p : pts)
      svg_ << "<circle class=\"" << cls << "\" cx=\"" << px(p.x) << "\" cy=\"" << py(p.y) << "\" r=\"4\" fill=\"" << color
           << "\" stroke=\"white\"/>\n";
  }

  void label(const Point& p, const std::string& text, const char* color) {
    svg_ << "<text x=\"" << px(p.x) - 6 << "\" y=\"" << py(p.y) - 10 << "\" text-anchor=\"end\" fill=\"" << color << "\" font-weight=\"bold\">"
         << escape(text) << "</text>\n";
  }

  // A dashed vertical line at the end of each epoch inside the x range, labelled with the epoch's
  // number; with many epochs, every 2nd, 5th, 10th, ... so that at most 10 are marked.
  void epochs(int64_t steps_per_epoch) {
    if (steps_per_epoch <= 1) return;
    const auto n = static_cast<int64_t>(std::floor(x_.hi / static_cast<double>(steps_per_epoch)));
    int64_t every = 1;
    for (int64_t m = 1; every * 10 < n; m *= 10)
      for (int64_t k : {2, 5, 10})
        if (every * 10 < n) every = k * m;
    for (int64_t e = every; e <= n; e += every) {
      const double xs = px(static_cast<double>(e * steps_per_epoch));
      svg_ << "<line class=\"epoch\" x1=\"" << xs << "\" y1=\"" << kTop << "\" x2=\"" << xs << "\" y2=\"" << kTop + kPlotH
           << "\" stroke=\"#999\" stroke-dasharray=\"3 3\"/>\n";
      svg_ << "<text x=\"" << xs - 3 << "\" y=\"" << kTop + 12 << "\" text-anchor=\"end\" font-size=\"10\" fill=\"#777\">epoch " << e << "</text>\n";
    }
  }

  void hline(double y, const char* color) {
    svg_ << "<line x1=\"" << x0_ << "\" y1=\"" << py(y) << "\" x2=\"" << x0_ + kPlotW << "\" y2=\"" << py(y) << "\" stroke=\"" << color
         << "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n";
  }

  // Legend entries in the panel's top-right (top) or bottom-right corner.
  void legend(const std::vector<std::pair<std::string, const char*>>& entries, bool top) {
    const double w = 190, h = 8 + 20.0 * entries.size();
    const double x = x0_ + kPlotW - w - 8, y = top ? kTop + 8 : kTop + kPlotH - h - 8;
    svg_ << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << h
         << "\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#bbb\"/>\n";
    for (size_t i = 0; i < entries.size(); ++i) {
      const double ly = y + 16 + 20.0 * i;
      svg_ << "<line x1=\"" << x + 8 << "\" y1=\"" << ly - 4 << "\" x2=\"" << x + 32 << "\" y2=\"" << ly - 4 << "\" stroke=\"" << entries[i].second
           << "\" stroke-width=\"3\"/>\n";
      svg_ << "<text x=\"" << x + 40 << "\" y=\"" << ly << "\">" << escape(entries[i].first) << "</text>\n";
    }
  }

  void note(const std::string& text) {
    svg_ << "<text x=\"" << x0_ + kPlotW / 2 << "\" y=\"" << kTop + kPlotH / 2 << "\" text-anchor=\"middle\" fill=\"#888\">" << escape(text)
         << "</text>\n";
  }

 private:
  std::ostringstream& svg_;
  double x0_;
  Range x_, y_;
  int id_;
};

// A centred moving average over `window` steps (shorter at the ends).
std::vector<double> moving_average(const std::vector<float>& v, size_t window) {
  std::vector<double> prefix(v.size() + 1, 0.0), out(v.size());
  for (size_t i = 0; i < v.size(); ++i) prefix[i + 1] = prefix[i] + v[i];
  const size_t half = window / 2;
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t lo = i >= half ? i - half : 0, hi = std::min(v.size(), i + half + 1);
    out[i] = (prefix[hi] - prefix[lo]) / static_cast<double>(hi - lo);
  }
  return out;
}

}  // namespace

std::string render_plot(const PlotInput& in) {
  const History& h = *in.history;
  const int64_t spe = std::max<int64_t>(in.steps_per_epoch, 1);
  const int64_t steps = static_cast<int64_t>(h.step_loss.size());
  // Both panels count steps, so a run of an epoch or less spreads its evaluations over the axis.
  int64_t last = std::max<int64_t>(steps, 1);
  for (const auto& e : h.evals) last = std::max(last, e.step);
  const Range x = nice_range(0, static_cast<double>(last));
  const std::string xlabel = spe > 1 ? "step (an epoch is " + std::to_string(spe) + " steps; dashed lines mark the epochs)" : "step";

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight << "\" viewBox=\"0 0 " << kWidth << " "
      << kHeight << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kWidth / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">" << escape(in.title) << "</text>\n";

  // Loss: the axis covers every plotted value (each step's loss, the moving average, the test
  // losses) from 0, widened to round ticks.
  const size_t window = static_cast<size_t>(std::clamp<int64_t>(in.steps_per_epoch / 8, 1, 200));
  const std::vector<double> smooth = moving_average(h.step_loss, window);
  double lmax = 0;
  for (float v : h.step_loss)
    if (std::isfinite(v)) lmax = std::max(lmax, static_cast<double>(v));
  for (const auto& e : h.evals)
    if (std::isfinite(e.test_loss)) lmax = std::max(lmax, e.test_loss);
  Panel loss(svg, 0, x, nice_range(0, lmax > 0 ? lmax : 1));
  loss.frame("Loss", xlabel, in.loss_name);
  loss.epochs(spe);
  std::vector<Point> raw, avg, test_loss;
  for (int64_t i = 0; i < steps; ++i) {
    raw.push_back({static_cast<double>(i + 1), h.step_loss[static_cast<size_t>(i)]});
    avg.push_back({static_cast<double>(i + 1), smooth[static_cast<size_t>(i)]});
  }
  for (const auto& e : h.evals) test_loss.push_back({static_cast<double>(e.step), e.test_loss});
  if (window >= 3) {
    // Many steps an epoch: the raw losses are noise around the trend, so they are drawn faint.
    loss.polyline(raw, "train-loss", kBlue, 1, 0.25);
    loss.polyline(avg, "train-loss-mean", kBlue, 2.2);
    loss.legend(
        {{"train loss per step", "#a9c8e4"}, {"train, mean of " + std::to_string(window) + " steps", kBlue}, {in.test_name + " loss", kOrange}},
        true);
  } else {
    loss.polyline(raw, "train-loss", kBlue, 1.5);
    loss.legend({{"train loss per step", kBlue}, {in.test_name + " loss", kOrange}}, true);
  }
  loss.polyline(test_loss, "test-loss", kOrange, 2);
  loss.markers(test_loss, "test-loss", kOrange);
  if (steps == 0) loss.note("no step recorded");

  // Accuracy: the range of the values measured, widened to round ticks, within [0, 1].
  std::vector<Point> acc;
  for (const auto& e : h.evals) acc.push_back({static_cast<double>(e.step), e.test_accuracy});
  double amin = 1, amax = 0;
  for (const Point& p : acc) {
    amin = std::min(amin, p.y);
    amax = std::max(amax, p.y);
  }
  if (acc.empty()) amin = 0, amax = 1;
  if (in.target_accuracy >= 0) {
    amin = std::min(amin, in.target_accuracy);
    amax = std::max(amax, in.target_accuracy);
  }
  const double pad = std::max(0.01, (amax - amin) * 0.15);
  Range ar = nice_range(std::max(0.0, amin - pad), std::min(1.0, amax + pad));
  ar.lo = std::max(0.0, ar.lo);
  ar.hi = std::min(1.0, ar.hi);
  Panel accuracy(svg, 1, x, ar);
  accuracy.frame(in.accuracy_title, xlabel, "accuracy");
  accuracy.epochs(spe);
  if (in.target_accuracy >= 0) accuracy.hline(in.target_accuracy, "#888");
  accuracy.polyline(acc, "accuracy", kGreen, 2);
  accuracy.markers(acc, "accuracy", kGreen);
  if (!acc.empty()) accuracy.label(acc.back(), num(acc.back().y, 4), kGreen);
  if (in.target_accuracy >= 0)
    accuracy.legend({{in.test_name + " accuracy", kGreen}, {"target " + num(in.target_accuracy), "#888"}}, false);
  else
    accuracy.legend({{in.test_name + " accuracy", kGreen}}, false);
  if (acc.empty()) accuracy.note("no evaluation yet");
  svg << "</svg>\n";
  return svg.str();
}

void write_plot(const std::string& path, const PlotInput& in) {
  const std::string text = render_plot(in);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DP_CHECK(out.good(), IOError, "--plot: cannot write ", tmp);
    out << text;
    out.flush();
    DP_CHECK(out.good(), IOError, "--plot: error writing ", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw IOError("--plot: cannot rename " + tmp + " to " + path);
  }
}

}  // namespace dp::train
