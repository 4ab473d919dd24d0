// dp-train's SVG plot (tools/dp_train/plot.cpp): every plotted point lies inside its panel's plot
// area (the loss axis covers the first, largest losses; nothing is clipped away), and evaluations
// are placed by step, so a run of one epoch or less shows them where they happened. Checked on
// render_plot directly (the plot's source is compiled into this test, as dp-train's own parts have
// no library of their own) and on the file dp-train writes with --plot.
#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include "test_dp_train_util.h"

#include "../../tools/dp_train/plot.cpp"  // NOLINT(bugprone-suspicious-include): render_plot, tested directly

namespace {

using namespace dp_train_test;

struct Area {
  double x = 0, y = 0, w = 0, h = 0;
  bool contains(double px, double py) const {
    constexpr double eps = 0.01;  // coordinates are printed with 6 significant digits
    return px >= x - eps && px <= x + w + eps && py >= y - eps && py <= y + h + eps;
  }
};

struct Svg {
  std::map<int, Area> areas;                                              // panel -> plot area (its clip rect)
  std::map<std::string, std::vector<std::pair<double, double>>> series;   // class -> polyline points
  std::map<std::string, std::vector<std::pair<double, double>>> markers;  // class -> circle centres
  std::map<std::string, int> panel_of;                                    // polyline class -> panel
  int epoch_lines = 0;
};

Svg parse(const std::string& svg) {
  Svg s;
  const std::regex clip(R"re(<clipPath id="clip(\d)"><rect x="([-0-9.e+]+)" y="([-0-9.e+]+)" width="([-0-9.e+]+)" height="([-0-9.e+]+)"/>)re");
  for (std::sregex_iterator it(svg.begin(), svg.end(), clip), end; it != end; ++it)
    s.areas[std::stoi((*it)[1])] = {std::stod((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4]), std::stod((*it)[5])};
  // The tag's start by regex; its points attribute (thousands of characters) by find: libstdc++'s
  // regex matches recursively, one stack frame per character, and a long [^"]* overflows the stack
  // (under AddressSanitizer's larger frames).
  const std::regex poly(R"re(<polyline class="([a-z-]+)" clip-path="url\(#clip(\d)\)")re");
  const std::regex point(R"(([-0-9.e+]+),([-0-9.e+]+))");
  for (std::sregex_iterator it(svg.begin(), svg.end(), poly), end; it != end; ++it) {
    const std::string cls = (*it)[1];
    const size_t tag_end = svg.find('>', static_cast<size_t>(it->position()));
    const size_t at = svg.find(" points=\"", static_cast<size_t>(it->position()));
    if (at == std::string::npos || at > tag_end) continue;
    const size_t from = at + 9, to = svg.find('"', from);
    const std::string pts = svg.substr(from, to - from);
    s.panel_of[cls] = std::stoi((*it)[2]);
    for (std::sregex_iterator p(pts.begin(), pts.end(), point); p != end; ++p) s.series[cls].emplace_back(std::stod((*p)[1]), std::stod((*p)[2]));
  }
  const std::regex circle(R"re(<circle class="([a-z-]+)" cx="([-0-9.e+]+)" cy="([-0-9.e+]+)")re");
  for (std::sregex_iterator it(svg.begin(), svg.end(), circle), end; it != end; ++it)
    s.markers[(*it)[1]].emplace_back(std::stod((*it)[2]), std::stod((*it)[3]));
  const std::regex epoch(R"re(<line class="epoch")re");
  s.epoch_lines = static_cast<int>(std::distance(std::sregex_iterator(svg.begin(), svg.end(), epoch), std::sregex_iterator()));
  return s;
}

// Every point of every series and marker lies in its panel's plot area (test losses and
// accuracies: panels 0 and 1).
void expect_inside(const Svg& s) {
  ASSERT_EQ(s.areas.size(), 2u);
  for (const auto& [cls, pts] : s.series) {
    const Area& a = s.areas.at(s.panel_of.at(cls));
    for (const auto& [x, y] : pts) EXPECT_TRUE(a.contains(x, y)) << cls << " point (" << x << ", " << y << ") is outside its plot area";
  }
  for (const auto& [cls, pts] : s.markers) {
    const Area& a = s.areas.at(cls == "accuracy" ? 1 : 0);
    for (const auto& [x, y] : pts) EXPECT_TRUE(a.contains(x, y)) << cls << " marker (" << x << ", " << y << ") is outside its plot area";
  }
}

// A one-epoch run of 200 steps whose loss starts at 2.3 (above the old 1.25 cap) with a spike,
// evaluated 4 times during the epoch.
dp::train::History one_epoch_history() {
  dp::train::History h;
  for (int i = 0; i < 200; ++i) h.step_loss.push_back(static_cast<float>(0.2 + 2.1 * std::exp(-i / 30.0)));
  h.step_loss[3] = 3.7f;
  for (int k = 1; k <= 4; ++k) h.evals.push_back({50 * k, 0.5 + 0.1 * k, 1.5 - 0.2 * k, 1.0});
  return h;
}

TEST(DpTrainPlot, LossAxisCoversTheFirstLosses) {
  const dp::train::History h = one_epoch_history();
  dp::train::PlotInput in;
  in.history = &h;
  in.steps_per_epoch = 200;
  const Svg s = parse(dp::train::render_plot(in));
  expect_inside(s);
  // The highest loss is drawn at the top of the area, not above it.
  const auto& raw = s.series.at("train-loss");
  ASSERT_EQ(raw.size(), 200u);
  const double top = std::min_element(raw.begin(), raw.end(), [](auto a, auto b) { return a.second < b.second; })->second;
  EXPECT_GE(top, s.areas.at(0).y);
  EXPECT_LE(top, s.areas.at(0).y + 0.3 * s.areas.at(0).h) << "the axis is far taller than the data";
  // A round top tick: 3.7 -> 4.
  EXPECT_NE(dp::train::render_plot(in).find(">4</text>"), std::string::npos);
}

TEST(DpTrainPlot, EvaluationsOfAOneEpochRunAreSpreadByStep) {
  const dp::train::History h = one_epoch_history();
  dp::train::PlotInput in;
  in.history = &h;
  in.steps_per_epoch = 200;
  in.target_accuracy = 0.9;
  const std::string svg = dp::train::render_plot(in);
  const Svg s = parse(svg);
  expect_inside(s);
  const auto& acc = s.markers.at("accuracy");
  ASSERT_EQ(acc.size(), 4u);
  // At steps 50, 100, 150, 200 of an axis 0..200: a quarter of the width apart.
  const Area& a = s.areas.at(1);
  for (size_t k = 0; k < acc.size(); ++k) EXPECT_NEAR(acc[k].first, a.x + a.w * static_cast<double>(k + 1) / 4, 1e-6);
  EXPECT_NE(svg.find("step (an epoch is 200 steps"), std::string::npos);
  EXPECT_EQ(s.epoch_lines, 2);  // one per panel, at step 200
}

TEST(DpTrainPlot, ManyEpochsMarkAtMostTenPerPanel) {
  dp::train::History h;
  for (int i = 0; i < 500; ++i) h.step_loss.push_back(1.0f);
  for (int e = 1; e <= 50; ++e) h.evals.push_back({10 * e, 0.5, 1.0, 1.0});
  dp::train::PlotInput in;
  in.history = &h;
  in.steps_per_epoch = 10;
  const Svg s = parse(dp::train::render_plot(in));
  expect_inside(s);
  EXPECT_EQ(s.markers.at("accuracy").size(), 50u);
  EXPECT_EQ(s.epoch_lines, 2 * 10);  // every 5th epoch
}

TEST(DpTrainPlot, EmptyHistoryStillDraws) {
  dp::train::History h;
  dp::train::PlotInput in;
  in.history = &h;
  const std::string svg = dp::train::render_plot(in);
  EXPECT_NE(svg.find("no step recorded"), std::string::npos);
  EXPECT_NE(svg.find("no evaluation yet"), std::string::npos);
}

// dp-train's own plot: an MLP on 10 random classes starts near ln 10 = 2.3.
TEST(DpTrainPlot, DpTrainPlotsEveryPointInside) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  // 20 steps an epoch, 3 epochs: 3 evaluations.
  Result r = run({"--model", "mlp", "--data", "random", "--hidden", "32", "--data-size", "400", "--batch-size", "20", "--epochs", "3", "--devices",
                  "cpu:0,cpu:1", "--log", dir.file("log.jsonl"), "--plot", dir.file("plot.svg")},
                 dir);
  ASSERT_EQ(r.status, 0) << describe(r);
  double max_loss = 0;
  for (const auto& e : events(read_jsonl(dir.file("log.jsonl")), "step")) max_loss = std::max(max_loss, e.at("loss").get<double>());
  EXPECT_GT(max_loss, 1.25) << "the premise: the first losses are above the old cap";
  const Svg s = parse(read_text(dir.file("plot.svg")));
  expect_inside(s);
  EXPECT_EQ(s.series.at("train-loss").size(), 60u);
  EXPECT_EQ(s.markers.at("accuracy").size(), 3u);
  EXPECT_EQ(s.epoch_lines, 2 * 3);
}

// 800 steps in one epoch with a high learning rate: the loss falls from 2.3 within a few steps,
// so the moving average over 100 steps stays far below the first losses; the axis must still
// cover those (the old plot scaled to the average and clipped them).
TEST(DpTrainPlot, DpTrainFirstLossesAreNotCutOff) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  Result r =
      run({"--model", "mlp",  "--data", "random",    "--hidden",    "32",    "--data-size",         "16000",  "--batch-size",      "20", "--epochs",
           "1",       "--lr", "0.01",   "--devices", "cpu:0,cpu:1", "--log", dir.file("log.jsonl"), "--plot", dir.file("plot.svg")},
          dir);
  ASSERT_EQ(r.status, 0) << describe(r);
  double max_loss = 0;
  for (const auto& e : events(read_jsonl(dir.file("log.jsonl")), "step")) max_loss = std::max(max_loss, e.at("loss").get<double>());
  EXPECT_GT(max_loss, 1.25);
  const Svg s = parse(read_text(dir.file("plot.svg")));
  expect_inside(s);
  ASSERT_EQ(s.series.at("train-loss").size(), 800u);
  EXPECT_EQ(s.series.count("train-loss-mean"), 1u) << "many steps an epoch: a moving average is drawn";
  ASSERT_EQ(s.markers.at("accuracy").size(), 1u);
}

// Less than an epoch (--steps 15 of 20): the one evaluation, at the end, is inside the panel.
TEST(DpTrainPlot, DpTrainRunShorterThanAnEpoch) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  Result r = run({"--model", "mlp", "--data", "random", "--hidden", "32", "--data-size", "400", "--batch-size", "20", "--steps", "15", "--devices",
                  "cpu:0,cpu:1", "--plot", dir.file("plot.svg")},
                 dir);
  ASSERT_EQ(r.status, 0) << describe(r);
  const Svg s = parse(read_text(dir.file("plot.svg")));
  expect_inside(s);
  EXPECT_EQ(s.series.at("train-loss").size(), 15u);
  ASSERT_EQ(s.markers.at("accuracy").size(), 1u);
  EXPECT_NEAR(s.markers.at("accuracy")[0].first, s.areas.at(1).x + s.areas.at(1).w, 1e-6) << "step 15 of an axis 0..15";
  EXPECT_EQ(s.epoch_lines, 0);
}

}  // namespace
