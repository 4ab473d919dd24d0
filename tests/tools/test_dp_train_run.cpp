// dp-train end to end: short runs of each model, the outputs a run leaves (stdout lines, JSONL log,
// SVG plot, weights), Fashion-MNIST on two CPU devices, and the exit statuses of a finished run.
#include <regex>
#include "dp/dp.h"
#include "dp/nn/serialize.h"
#include "tools/test_dp_train_util.h"

namespace {

using namespace dp_train_test;

TEST(DpTrainRun, SeedModelOnRandomDataLearnsAndReportsEveryStep) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  Result r = run({"--model", "seed", "--epochs", "20", "--devices", "cpu:0,cpu:1", "--log", dir.file("log.jsonl"), "--plot", dir.file("plot.svg"),
                  "--save", dir.file("w.safetensors")},
                 dir);
  ASSERT_EQ(r.status, 0) << describe(r);
  // Not a terminal: one plain line per step (100 rows in batches of 30: 4 steps an epoch).
  const std::regex step_line(R"(epoch \d+/20  batch \d/4  step (\d+)/80  loss [0-9.]+  lr \S+  \d+ samples/s  ETA \S+)");
  int steps = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (std::regex_match(line, step_line)) ++steps;
  EXPECT_EQ(steps, 80) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << "no carriage returns when stdout is not a terminal";
  EXPECT_NE(r.out.find("batch 30 split 15+15"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu:0 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu:1 "), std::string::npos) << r.out;
  // It learns the hyperplane: seed 0 gives 0.99 on the 100 held-out rows; ask for less.
  EXPECT_GE(final_accuracy(r.out), 0.9) << r.out;

  const auto log = read_jsonl(dir.file("log.jsonl"));
  const auto step_records = events(log, "step");
  const auto evals = events(log, "eval");
  ASSERT_EQ(step_records.size(), 80u);
  ASSERT_EQ(evals.size(), 20u);  // one per epoch; the last is also the final evaluation
  EXPECT_EQ(events(log, "start").size(), 1u);
  EXPECT_EQ(events(log, "end").size(), 1u);
  for (size_t i = 0; i < step_records.size(); ++i) {
    EXPECT_EQ(step_records[i].at("step"), i + 1);
    EXPECT_TRUE(std::isfinite(step_records[i].at("loss").get<double>()));
  }
  EXPECT_LT(evals.back().at("test_loss").get<double>(), evals.front().at("test_loss").get<double>());
  // Cosine schedule: the first step uses the base rate, the last one almost nothing.
  EXPECT_DOUBLE_EQ(step_records.front().at("lr").get<double>(), 0.05);
  EXPECT_LT(step_records.back().at("lr").get<double>(), 1e-3);

  const std::string svg = read_text(dir.file("plot.svg"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  for (const char* part : {"Loss", "Test accuracy", "epoch", "<polyline", "test loss", "</svg>"})
    EXPECT_NE(svg.find(part), std::string::npos) << part;

  // The saved weights are the model's state_dict with PyTorch's keys.
  auto w = dp::load(dir.file("w.safetensors"));
  EXPECT_EQ(w.size(), 2u);
  EXPECT_TRUE(w.contains("0.weight") && w.contains("0.bias"));
}

TEST(DpTrainRun, MlpAndCnnOnRandomDataRun) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  for (const char* model : {"mlp", "cnn"}) {
    Result r = run({"--model", model, "--data", "random", "--hidden", "32", "--data-size", "64", "--batch-size", "16", "--steps", "3"}, dir);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("finished: 3 steps"), std::string::npos) << r.out;
    EXPECT_GE(final_accuracy(r.out), 0.0) << r.out;
  }
}

// The loss computed on the replicas is the loss computed on the gathered output (up to rounding).
TEST(DpTrainRun, ParallelLossGivesTheSameLosses) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  const std::vector<std::string> base{"--model", "mlp", "--data",    "random",      "--hidden",    "32",  "--data-size", "96",  "--batch-size", "32",
                                      "--steps", "6",   "--devices", "cpu:0,cpu:1", "--optimizer", "sgd", "--lr",        "0.05"};
  Result a = run(concat(base, {"--log", dir.file("a.jsonl")}), dir, "a");
  Result b = run(concat(base, {"--parallel-loss", "--log", dir.file("b.jsonl")}), dir, "b");
  ASSERT_EQ(a.status, 0) << describe(a);
  ASSERT_EQ(b.status, 0) << describe(b);
  EXPECT_NE(b.out.find("loss on the replicas"), std::string::npos) << b.out;
  const auto la = events(read_jsonl(dir.file("a.jsonl")), "step"), lb = events(read_jsonl(dir.file("b.jsonl")), "step");
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lb.size(), 6u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i].at("loss").get<double>(), lb[i].at("loss").get<double>(), 1e-5) << "step " << i + 1;
}

TEST(DpTrainRun, OneDeviceAndHostOutputDevice) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  Result r = run({"--model", "seed", "--epochs", "2", "--devices", "cpu:0", "--output-device", "cpu"}, dir);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("devices: cpu:0 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("outputs gathered on cpu,"), std::string::npos) << r.out;
}

TEST(DpTrainRun, AutoDevicesUseEveryCpuDevice) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  Result r = run({"--model", "seed", "--epochs", "1"}, dir);
  ASSERT_EQ(r.status, 0) << describe(r);
  std::string all;
  for (int i = 0; i < dp::cpu_device_count(); ++i) all += (i ? "," : "") + std::string("cpu:") + std::to_string(i);
  EXPECT_NE(r.out.find("devices: " + all + " "), std::string::npos) << r.out;
}

TEST(DpTrainRun, MinAccuracyDecidesTheExitStatus) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  Result met = run({"--model", "seed", "--epochs", "20", "--min-accuracy", "0.5"}, dir, "met");
  EXPECT_EQ(met.status, 0) << describe(met);
  Result missed = run({"--model", "seed", "--epochs", "1", "--min-accuracy", "1"}, dir, "missed");
  EXPECT_EQ(missed.status, 1) << describe(missed);
  EXPECT_NE(missed.out.find("is below --min-accuracy"), std::string::npos) << missed.out;
}

TEST(DpTrainRun, DivergenceStopsWithExitStatus3) {
  DP_TRAIN_REQUIRE_BINARY();
  TempDir dir;
  Result r = run({"--model", "mlp", "--data", "random", "--hidden", "16", "--optimizer", "sgd", "--lr", "1e30", "--steps", "20"}, dir);
  EXPECT_EQ(r.status, 3) << describe(r);
  EXPECT_NE(r.err.find("training diverged; try a lower --lr"), std::string::npos) << describe(r);
}

TEST(DpTrainRun, FashionMnistOnTwoCpuDevices) {
  DP_TRAIN_REQUIRE_BINARY();
  DP_TRAIN_REQUIRE_FASHION_MNIST();
  TempDir dir;
  Result r = run({"--model", "mlp", "--hidden", "64", "--data", "fashion-mnist", "--devices", "cpu:0,cpu:1", "--steps", "40", "--batch-size", "128",
                  "--workers", "2", "--log", dir.file("log.jsonl")},
                 dir);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("60000 train, 10000 test images"), std::string::npos) << r.out;
  // 40 steps of 128 rows, split 64 + 64.
  EXPECT_NE(r.out.find("cpu:0 "), std::string::npos);
  EXPECT_NE(r.out.find("(2560 samples), cpu:1 "), std::string::npos) << r.out;
  // 5120 images are enough to get well past chance (0.1): about 0.7 with this seed.
  EXPECT_GT(final_accuracy(r.out), 0.6) << r.out;
  const auto steps = events(read_jsonl(dir.file("log.jsonl")), "step");
  ASSERT_EQ(steps.size(), 40u);
  EXPECT_LT(steps.back().at("loss").get<double>(), steps.front().at("loss").get<double>());
}

}  // namespace
