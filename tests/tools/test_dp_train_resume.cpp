// Checkpoints and resumption: a run stopped (--stop-after, or Ctrl-C = SIGINT) and resumed ends on
// exactly the weights of the same run left alone (the saved files compare equal byte for byte),
// mid-epoch as well as at an epoch boundary; resumed on a different number of devices it agrees
// to float rounding; the checkpoint refuses changed settings.
#include <cmath>
#include "dp/dp.h"
#include "dp/nn/serialize.h"
#include "tools/test_dp_train_util.h"

namespace {

using namespace dp_train_test;

// 200 rows in batches of 32: 7 steps an epoch (the last of 8 rows), 3 epochs = 21 steps.
const std::vector<std::string> kRun{"--model",      "mlp", "--data",   "random", "--hidden",    "32",   "--data-size", "200",
                                    "--batch-size", "32",  "--epochs", "3",      "--optimizer", "adam", "--lr",        "0.01"};

double max_abs_diff(const std::string& a, const std::string& b) {
  auto ta = dp::load(a), tb = dp::load(b);
  EXPECT_EQ(ta.keys(), tb.keys());
  double worst = 0;
  for (const auto& item : ta) {
    auto x = item.value().to_vector<float>(), y = tb[item.key()].to_vector<float>();
    EXPECT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
  }
  return worst;
}

std::vector<double> step_losses(const std::string& log) {
  std::vector<double> out;
  for (const auto& r : events(read_jsonl(log), "step")) out.push_back(r.at("loss").get<double>());
  return out;
}

class DpTrainResume : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kBinary == nullptr) GTEST_SKIP() << "dp-train is not built";
    Result r = run(concat(kRun, {"--devices", "cpu:0,cpu:1", "--save", dir.file("straight.safetensors"), "--log", dir.file("straight.jsonl")}), dir,
                   "straight");
    ASSERT_EQ(r.status, 0) << describe(r);
  }
  // Stops after `stop` steps with a checkpoint, resumes with `resume_args`; returns the resumed run.
  Result stop_and_resume(int stop, const std::vector<std::string>& first_args, const std::vector<std::string>& resume_args) {
    Result first = run(concat(concat(kRun, first_args),
                              {"--stop-after", std::to_string(stop), "--checkpoint-dir", dir.file("ck"), "--log", dir.file("resumed.jsonl")}),
                       dir, "first");
    EXPECT_EQ(first.status, 0) << describe(first);
    EXPECT_NE(first.out.find("stopped after " + std::to_string(stop) + " steps (--stop-after)"), std::string::npos) << first.out;
    EXPECT_NE(first.out.find("dp-train --resume " + dir.file("ck")), std::string::npos) << first.out;
    return run(concat({"--resume", dir.file("ck"), "--save", dir.file("resumed.safetensors"), "--log", dir.file("resumed.jsonl")}, resume_args), dir,
               "second");
  }
  TempDir dir;
};

TEST_F(DpTrainResume, StoppedMidEpochAndResumedIsBitIdentical) {
  // Step 10 is batch 3 of epoch 2. The loader's worker count does not change the batches.
  Result r = stop_and_resume(10, {"--devices", "cpu:0,cpu:1", "--workers", "0"}, {"--devices", "cpu:0,cpu:1", "--workers", "2"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("resuming " + dir.file("ck") + " at step 10 of 21 (epoch 2, batch 4 of 7)"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(dir.file("resumed.safetensors")), read_text(dir.file("straight.safetensors")))
      << "max |difference| " << max_abs_diff(dir.file("resumed.safetensors"), dir.file("straight.safetensors"));
  // The log goes on where it stopped, and each step's loss is the uninterrupted run's.
  EXPECT_EQ(step_losses(dir.file("resumed.jsonl")), step_losses(dir.file("straight.jsonl")));
  const auto log = read_jsonl(dir.file("resumed.jsonl"));
  EXPECT_EQ(events(log, "stop").size(), 1u);
  EXPECT_EQ(events(log, "start").back().at("resumed_at"), 10);
}

TEST_F(DpTrainResume, StoppedAtAnEpochEndAndResumedIsBitIdentical) {
  Result r = stop_and_resume(7, {"--devices", "cpu:0,cpu:1"}, {});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("at step 7 of 21 (epoch 2, batch 1 of 7)"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(dir.file("resumed.safetensors")), read_text(dir.file("straight.safetensors")));
}

// A different device count splits each batch differently (16+16 vs 32 rows), so the gradient sums
// round differently: equal to float rounding, not bit for bit. Measured: after 11 Adam steps at
// lr 0.01 the weights (|w| up to 0.24) differ by at most 1.5e-8; the bound leaves room for other
// BLAS kernels.
TEST_F(DpTrainResume, ResumedOnOneDeviceAgreesToRounding) {
  Result r = stop_and_resume(10, {"--devices", "cpu:0,cpu:1"}, {"--devices", "cpu:0"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("devices: cpu:0 "), std::string::npos) << r.out;
  const double diff = max_abs_diff(dir.file("resumed.safetensors"), dir.file("straight.safetensors"));
  EXPECT_LT(diff, 1e-6);
  const auto a = step_losses(dir.file("resumed.jsonl")), b = step_losses(dir.file("straight.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << "step " << i + 1;
}

TEST_F(DpTrainResume, CtrlCLeavesAResumableCheckpoint) {
  // A run long enough to be interrupted: CNN steps on random images (tens of ms each).
  const std::vector<std::string> cnn{"--model",      "cnn", "--data",   "random", "--data-size", "512",
                                     "--batch-size", "16",  "--epochs", "1",      "--devices",   "cpu:0,cpu:1",
                                     "--optimizer",  "sgd", "--lr",     "0.01",   "--momentum",  "0.9"};
  Result straight = run(concat(cnn, {"--save", dir.file("cnn-straight.safetensors")}), dir, "cnn-straight");
  ASSERT_EQ(straight.status, 0) << describe(straight);

  Process p = start(concat(cnn, {"--checkpoint-dir", dir.file("cnn-ck"), "--log", dir.file("cnn.jsonl")}), dir, "cnn-first");
  // Interrupt once a few steps are done (polling the log the run flushes line by line).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (events(read_jsonl(dir.file("cnn.jsonl")), "step").size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(p.pid, SIGINT);
  Result first = wait(p);
  first.command = "dp-train (interrupted with SIGINT)";
  ASSERT_EQ(first.status, 130) << "the run must stop on SIGINT with 128 + 2 (did it finish before the signal?)\n" << describe(first);
  EXPECT_NE(first.out.find("stopped by Ctrl-C (SIGINT) at step "), std::string::npos) << first.out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("cnn-ck/checkpoint.safetensors")));
  // Atomic writes leave no temporary file behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("cnn-ck")), std::filesystem::directory_iterator()), 1);
  const auto stop = events(read_jsonl(dir.file("cnn.jsonl")), "stop");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_LT(stop[0].at("step").get<int>(), 32) << "interrupted before the end";

  Result second = run({"--resume", dir.file("cnn-ck"), "--save", dir.file("cnn-resumed.safetensors")}, dir, "cnn-second");
  ASSERT_EQ(second.status, 0) << describe(second);
  EXPECT_EQ(read_text(dir.file("cnn-resumed.safetensors")), read_text(dir.file("cnn-straight.safetensors")))
      << "max |difference| " << max_abs_diff(dir.file("cnn-resumed.safetensors"), dir.file("cnn-straight.safetensors"));
}

TEST_F(DpTrainResume, InterruptedWithoutCheckpointDirSaysSo) {
  Result r = run(concat(kRun, {"--stop-after", "3"}), dir, "nodir");
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("no --checkpoint-dir was given, so nothing was saved to resume from"), std::string::npos) << r.out;
}

TEST_F(DpTrainResume, CheckpointEveryNStepsAndAtEachEpochEnd) {
  Result r = run(concat(kRun, {"--checkpoint-dir", dir.file("ck"), "--checkpoint-every", "5", "--log", dir.file("ck.jsonl")}), dir, "every");
  ASSERT_EQ(r.status, 0) << describe(r);
  std::vector<int> at;
  for (const auto& c : events(read_jsonl(dir.file("ck.jsonl")), "checkpoint")) at.push_back(c.at("step").get<int>());
  // Every 5 steps (5, 10, 15, 20), every epoch end (7, 14, 21); the end of the run is an epoch end.
  EXPECT_EQ(at, (std::vector<int>{5, 7, 10, 14, 15, 20, 21}));
}

TEST_F(DpTrainResume, ResumeRefusesChangedSettingsAndAcceptsUnchangedOnes) {
  Result first = run(concat(kRun, {"--stop-after", "4", "--checkpoint-dir", dir.file("ck")}), dir, "first");
  ASSERT_EQ(first.status, 0) << describe(first);
  Result changed = run({"--resume", dir.file("ck"), "--lr", "0.1"}, dir, "changed");
  EXPECT_EQ(changed.status, 2) << describe(changed);
  EXPECT_NE(changed.err.find("--lr 0.1 differs from the checkpoint's 0.01"), std::string::npos) << describe(changed);
  Result longer = run({"--resume", dir.file("ck"), "--epochs", "5"}, dir, "longer");
  EXPECT_EQ(longer.status, 2) << describe(longer);
  EXPECT_NE(longer.err.find("--epochs 5 differs from the checkpoint's 3"), std::string::npos) << describe(longer);
  // Repeating the run's own settings is fine.
  Result same =
      run({"--resume", dir.file("ck"), "--model", "mlp", "--epochs", "3", "--lr", "0.01", "--save", dir.file("same.safetensors")}, dir, "same");
  EXPECT_EQ(same.status, 0) << describe(same);
  EXPECT_EQ(read_text(dir.file("same.safetensors")), read_text(dir.file("straight.safetensors")));
}

TEST_F(DpTrainResume, ResumingAFinishedRunTrainsNothing) {
  Result first = run(concat(kRun, {"--checkpoint-dir", dir.file("ck")}), dir, "first");
  ASSERT_EQ(first.status, 0) << describe(first);
  Result again = run({"--resume", dir.file("ck"), "--save", dir.file("again.safetensors")}, dir, "again");
  ASSERT_EQ(again.status, 0) << describe(again);
  EXPECT_NE(again.out.find("is complete (step 21 of 21): nothing left to train"), std::string::npos) << again.out;
  EXPECT_EQ(read_text(dir.file("again.safetensors")), read_text(dir.file("straight.safetensors")));
}

}  // namespace
