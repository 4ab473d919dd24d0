// dp-train across processes (DistributedDataParallel), each rank a process started with the
// launcher's environment (dp::test::WorkerJob): the same command trains the same model on 1, 2 and
// 3 processes (ragged shares of the batch included, and a last batch with fewer rows than ranks,
// shadowed in a Join; also from --init weights in --no-shuffle order)
// and with DataParallel inside each rank; rank 0 alone prints and the summary has every rank's
// throughput; a signal to one rank stops every rank after the same step with one consistent
// checkpoint, which resumes bit for bit on the same world size and to float rounding on another; a
// job restarted by its launcher resumes by itself; a setup failure on one rank stops all of them; 3
// SGD steps on 2 processes end on PyTorch's weights (test_dp_train_ddp_torch.h).
#include <csignal>
#include <regex>
#include <thread>
#include "dp/distributed/launch.h"
#include "tools/test_dp_train_ddp_torch.h"
#include "tools/test_dp_train_ddp_util.h"

namespace {

using namespace dp_train_ddp_test;

// 52 rows in batches of 7: 8 steps an epoch, the last of 3 rows. On 2 processes a batch is split
// 4+3 and the last 2+1; on 3, 3+2+2 and 1+1+1.
const std::vector<std::string> kSmall{"--model",  "mlp", "--hidden",    "16",  "--data", "random", "--data-size", "52",  "--batch-size", "7",
                                      "--epochs", "2",   "--optimizer", "sgd", "--lr",   "0.1",    "--momentum",  "0.9", "--progress",   "lines"};

// Long enough to be interrupted after a few steps: 400 rows in batches of 10, 60 steps of Adam
// (40 an epoch, so the run crosses an epoch end).
const std::vector<std::string> kLong{"--model", "mlp",     "--hidden", "16",          "--data", "random", "--data-size", "400",        "--batch-size",
                                     "10",      "--steps", "60",       "--optimizer", "adam",   "--lr",   "0.01",        "--progress", "none"};

class DpTrainDdp : public ::testing::Test {
 protected:
  void SetUp() override { DP_TRAIN_REQUIRE_BINARY(); }
  TempDir dir;
};

TEST_F(DpTrainDdp, OneTwoAndThreeProcessesTrainTheSameModel) {
  Result one = run(concat(kSmall, {"--save", dir.file("w1.safetensors"), "--log", dir.file("w1.jsonl")}), dir, "one");
  ASSERT_EQ(one.status, 0) << describe(one);
  for (int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " processes");
    const std::string w = dir.file("w" + std::to_string(world) + ".safetensors"), log = dir.file("w" + std::to_string(world) + ".jsonl");
    Ranks r = run_world(world, concat(kSmall, {"--save", w, "--log", log, "--checkpoint-dir", dir.file("ck" + std::to_string(world))}));
    for (int s : r.status) ASSERT_EQ(s, 0) << r.all();
    const std::string& out = r.output[0];
    // Rank 0 prints; the others print nothing.
    EXPECT_TRUE(contains(out, "processes: " + std::to_string(world) + " (DistributedDataParallel over gloo")) << out;
    EXPECT_TRUE(contains(out, world == 2 ? "batch 7 split 4+3 over the ranks" : "batch 7 split 3+2+2 over the ranks")) << out;
    EXPECT_TRUE(contains(out, "finished: 16 steps (2 epochs) of batch 7")) << out;
    for (int rank = 1; rank < world; ++rank) {
      EXPECT_FALSE(contains(r.output[static_cast<size_t>(rank)], "epoch")) << r.all();
      EXPECT_FALSE(contains(r.output[static_cast<size_t>(rank)], "finished")) << r.all();
    }
    // Every rank's throughput: its rows of 2 epochs (7 full batches and the last of 3 rows each).
    const std::string expect = world == 2 ? "over 2 processes: rank 0 .* samples/s (60 samples), rank 1 .* samples/s (44 samples)"
                                          : "over 3 processes: rank 0 .* samples/s (44 samples), rank 1 .* samples/s (30 samples), "
                                            "rank 2 .* samples/s (30 samples)";
    EXPECT_TRUE(std::regex_search(out, std::regex("throughput: [0-9]+ samples/s " + std::regex_replace(expect, std::regex("[()]"), "\\$&")))) << out;
    const auto end = events(read_jsonl(log), "end");
    ASSERT_EQ(end.size(), 1u);
    EXPECT_EQ(end[0].at("world_size"), world);
    EXPECT_EQ(end[0].at("rank_samples").size(), static_cast<size_t>(world));
    // The steps are the single process's: the rows of each global batch, the loss of each.
    const auto steps = events(read_jsonl(log), "step");
    ASSERT_EQ(steps.size(), 16u);
    EXPECT_EQ(steps[7].at("rows"), 3);
    const auto ours = step_losses(log), single = step_losses(dir.file("w1.jsonl"));
    ASSERT_EQ(ours.size(), single.size());
    for (size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(ours[i], single[i], 1e-5) << "step " << i + 1;
    // The same weights as one process (the gradient sums round differently: float rounding).
    const double diff = max_abs_diff(w, dir.file("w1.safetensors"));
    EXPECT_LT(diff, 1e-5);
    std::printf("%d processes vs 1: max |weight difference| %g after 16 SGD steps\n", world, diff);
    // The checkpoint, written by rank 0 for all, says where the run stands, as one process's would.
    EXPECT_EQ(checkpoint_step(dir.file("ck" + std::to_string(world))), 16);
  }
}

// --init and --no-shuffle (given starting weights, the rows visited in order: how a comparison
// with another framework runs) on 1 and 3 processes end on the same weights. The starting weights
// are those of one SGD step from the seed's, so they are not what the seed would initialise.
TEST_F(DpTrainDdp, InitAndNoShuffleOnOneAndThreeProcessesReachTheSameWeights) {
  const std::vector<std::string> base{"--model",     "mlp", "--hidden", "16",  "--data",     "random", "--data-size", "52",  "--batch-size", "7",
                                      "--optimizer", "sgd", "--lr",     "0.1", "--momentum", "0.9",    "--progress",  "none"};
  const std::string init = dir.file("init.safetensors");
  Result first = run(concat(base, {"--steps", "1", "--save", init}), dir, "init");
  ASSERT_EQ(first.status, 0) << describe(first);
  const std::vector<std::string> args = concat(base, {"--epochs", "2", "--no-shuffle", "--init", init});
  Result one = run(concat(args, {"--save", dir.file("w1.safetensors")}), dir, "one");
  ASSERT_EQ(one.status, 0) << describe(one);
  Ranks three = run_world(3, concat(args, {"--save", dir.file("w3.safetensors")}));
  for (int s : three.status) ASSERT_EQ(s, 0) << three.all();
  const double diff = max_abs_diff(dir.file("w3.safetensors"), dir.file("w1.safetensors"));
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(max_abs_diff(dir.file("w1.safetensors"), init), 1e-3) << "the runs did not train";
  std::printf("--init --no-shuffle, 3 processes vs 1: max |weight difference| %g after 16 SGD steps\n", diff);
}

TEST_F(DpTrainDdp, DataParallelInsideEachProcess) {
  Result one = run(concat(kSmall, {"--devices", "cpu:0", "--save", dir.file("w1.safetensors")}), dir, "one");
  ASSERT_EQ(one.status, 0) << describe(one);
  Ranks r = run_world(2, concat(kSmall, {"--devices", "cpu:0,cpu:1", "--save", dir.file("hybrid.safetensors")}), {"DP_CPU_DEVICES=2"});
  for (int s : r.status) ASSERT_EQ(s, 0) << r.all();
  EXPECT_TRUE(contains(r.output[0], "inside rank 0 DataParallel over cpu:0,cpu:1 (its 4 rows split 2+2)")) << r.output[0];
  EXPECT_TRUE(contains(r.output[0], "rank 0's devices: cpu:0 ")) << r.output[0];
  const double diff = max_abs_diff(dir.file("hybrid.safetensors"), dir.file("w1.safetensors"));
  EXPECT_LT(diff, 1e-5);
  std::printf("2 processes x 2 devices vs 1 process x 1 device: max |weight difference| %g\n", diff);
}

// SIGINT reaches rank 1 only; the ranks agree to stop after the same step, write one checkpoint
// and exit 130. Resumed on 2 processes the run ends on the uninterrupted run's weights bit for bit;
// resumed on 1 or 3 processes, to float rounding.
TEST_F(DpTrainDdp, SignalToOneRankStopsAllAndTheCheckpointResumesOnAnyWorldSize) {
  Ranks straight = run_world(2, concat(kLong, {"--save", dir.file("straight.safetensors")}));
  for (int s : straight.status) ASSERT_EQ(s, 0) << straight.all();

  const std::string ck = dir.file("ck"), log = dir.file("log.jsonl");
  int64_t stopped_at = 0;
  {
    dp::test::WorkerJob job(kBinary, {concat(kLong, {"--checkpoint-dir", ck, "--log", log}), concat(kLong, {"--checkpoint-dir", ck, "--log", log})},
                            30);
    auto ranks = [&](size_t i) -> dp::test::WorkerProcess& { return job[static_cast<int>(i)]; };
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (last_step(read_jsonl_so_far(log)) < 3 && std::chrono::steady_clock::now() < deadline) {
      for (size_t i = 0; i < 2; ++i)
        while (ranks(i).read_line(milliseconds(1))) {
        }
    }
    ASSERT_GE(last_step(read_jsonl_so_far(log)), 3) << job.outputs();
    job[1].signal(SIGINT);
    std::vector<int> status = wait_all(ranks, 2, milliseconds(60000));
    EXPECT_EQ(status, (std::vector<int>{130, 130})) << job.outputs();
    const auto stop = events(read_jsonl(log), "stop");
    ASSERT_EQ(stop.size(), 1u) << job.outputs();
    stopped_at = stop[0].at("step").get<int64_t>();
    EXPECT_EQ(stop[0].at("reason"), "signal");
    EXPECT_TRUE(contains(job[0].output(), "stopped by Ctrl-C (SIGINT) (all 2 processes) at step " + std::to_string(stopped_at))) << job.outputs();
    ASSERT_LT(stopped_at, 60) << "the run ended before the signal";
  }
  EXPECT_EQ(checkpoint_step(ck), stopped_at);
  std::printf("stopped at step %lld of 60\n", static_cast<long long>(stopped_at));
  copy_dir(ck, dir.file("ck1"));
  copy_dir(ck, dir.file("ck3"));

  Ranks two = run_world(2, {"--resume", ck, "--save", dir.file("two.safetensors"), "--progress", "none", "--log", log});
  for (int s : two.status) ASSERT_EQ(s, 0) << two.all();
  EXPECT_TRUE(same_weights(dir.file("two.safetensors"), dir.file("straight.safetensors")))
      << "max |difference| " << max_abs_diff(dir.file("two.safetensors"), dir.file("straight.safetensors"));
  EXPECT_EQ(events(read_jsonl(log), "start").back().at("resumed_at"), stopped_at);

  Result one = run({"--resume", dir.file("ck1"), "--save", dir.file("one.safetensors"), "--progress", "none"}, dir, "one");
  ASSERT_EQ(one.status, 0) << describe(one);
  const double diff1 = max_abs_diff(dir.file("one.safetensors"), dir.file("straight.safetensors"));
  EXPECT_LT(diff1, 1e-5);

  Ranks three = run_world(3, {"--resume", dir.file("ck3"), "--save", dir.file("three.safetensors"), "--progress", "lines", "--log-every", "1000"});
  for (int s : three.status) ASSERT_EQ(s, 0) << three.all();
  EXPECT_TRUE(contains(three.output[0], "resuming " + dir.file("ck3") + " at step " + std::to_string(stopped_at))) << three.output[0];
  EXPECT_TRUE(contains(three.output[0], "batch 10 split 4+3+3 over the ranks")) << three.output[0];
  const double diff3 = max_abs_diff(dir.file("three.safetensors"), dir.file("straight.safetensors"));
  EXPECT_LT(diff3, 1e-5);
  std::printf(
      "2 processes stopped at step %lld and resumed on 1 / 3 processes vs uninterrupted on 2: max |weight difference| %g / %g "
      "(on 2: identical)\n",
      static_cast<long long>(stopped_at), diff1, diff3);
}

// --stop-after stops every rank; a launcher restart (DP_RESTART_COUNT=1) of the same command then
// resumes from --checkpoint-dir by itself and ends on the uninterrupted run's weights.
TEST_F(DpTrainDdp, RestartedJobResumesFromItsCheckpoint) {
  Ranks straight = run_world(2, concat(kSmall, {"--save", dir.file("straight.safetensors")}));
  for (int s : straight.status) ASSERT_EQ(s, 0) << straight.all();
  const std::vector<std::string> job =
      concat(kSmall, {"--checkpoint-dir", dir.file("ck"), "--save", dir.file("w.safetensors"), "--log", dir.file("log.jsonl")});

  Ranks first = run_world(2, concat(job, {"--stop-after", "5"}));
  EXPECT_EQ(first.status, (std::vector<int>{0, 0})) << first.all();
  EXPECT_TRUE(contains(first.output[0], "stopped after 5 steps (--stop-after) (all 2 processes) at step 5 of 16")) << first.all();

  Ranks restarted = run_world(2, job, {"DP_RESTART_COUNT=1"});
  for (int s : restarted.status) ASSERT_EQ(s, 0) << restarted.all();
  EXPECT_TRUE(contains(restarted.output[0], "restart 1 of this job (DP_RESTART_COUNT): continuing from the checkpoint in " + dir.file("ck")))
      << restarted.output[0];
  EXPECT_TRUE(contains(restarted.output[0], "resuming " + dir.file("ck") + " at step 5 of 16")) << restarted.output[0];
  EXPECT_TRUE(same_weights(dir.file("w.safetensors"), dir.file("straight.safetensors")))
      << "max |difference| " << max_abs_diff(dir.file("w.safetensors"), dir.file("straight.safetensors"));
  // The restarted attempt appends to the log: two starts, the second at step 5.
  const auto starts = events(read_jsonl(dir.file("log.jsonl")), "start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[1].at("resumed_at"), 5);
  EXPECT_EQ(starts[1].at("restart"), 1);

  // A restart before any checkpoint was written starts the run again.
  Ranks fresh =
      run_world(2, concat(kSmall, {"--checkpoint-dir", dir.file("empty"), "--save", dir.file("fresh.safetensors")}), {"DP_RESTART_COUNT=1"});
  for (int s : fresh.status) ASSERT_EQ(s, 0) << fresh.all();
  EXPECT_TRUE(contains(fresh.output[0], "holds no checkpoint yet, so the run starts again")) << fresh.output[0];
  EXPECT_TRUE(same_weights(dir.file("fresh.safetensors"), dir.file("straight.safetensors")));
}

// --stop-after given to rank 1 only: the vote stops rank 0 after the same step.
TEST_F(DpTrainDdp, StopAfterOnOneRankStopsEveryRankAfterThatStep) {
  Ranks r =
      run_ranks({concat(kSmall, {"--checkpoint-dir", dir.file("ck")}), concat(kSmall, {"--checkpoint-dir", dir.file("ck"), "--stop-after", "3"})});
  EXPECT_EQ(r.status, (std::vector<int>{0, 0})) << r.all();
  EXPECT_TRUE(contains(r.output[0], "stopped after 3 steps (--stop-after) (all 2 processes) at step 3 of 16")) << r.all();
  EXPECT_EQ(checkpoint_step(dir.file("ck")), 3);
}

// The run settings are compared across the ranks before the first step: a rank started with
// another --seed (different data orders) or --lr (diverging weights) is refused on every rank, by
// the option's name and both values, with or without checkpoints, and nothing is trained or written.
TEST_F(DpTrainDdp, DifferentRunSettingsOnOneRankAreRefusedByName) {
  Ranks seed = run_ranks({kSmall, concat(kSmall, {"--seed", "1"})});
  EXPECT_EQ(seed.status, (std::vector<int>{2, 2})) << seed.all();
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_TRUE(contains(seed.output[static_cast<size_t>(rank)],
                         "dp-train: rank " + std::to_string(rank) + ": error: --seed differs between the ranks: 0 on rank 0; 1 on rank 1."))
        << seed.all();
  const std::string ck = dir.file("ck");
  Ranks lr = run_ranks({concat(kSmall, {"--checkpoint-dir", ck}), concat(kSmall, {"--checkpoint-dir", ck, "--lr", "0.01"})});
  EXPECT_EQ(lr.status, (std::vector<int>{2, 2})) << lr.all();
  EXPECT_TRUE(contains(lr.output[0], "error: --lr differs between the ranks: 0.1 on rank 0; 0.01 on rank 1.")) << lr.all();
  EXPECT_FALSE(std::filesystem::exists(dir.file("ck/checkpoint.safetensors"))) << lr.all();
}

// SIGHUP (a closed terminal or SSH session) stops the run as SIGTERM does: every rank stops after
// the same step, the checkpoint is written, and the exit status is 129.
TEST_F(DpTrainDdp, HangupStopsEveryRankLikeTermAndCheckpoints) {
  const std::string ck = dir.file("ck"), log = dir.file("log.jsonl");
  dp::test::WorkerJob job(kBinary, {concat(kLong, {"--checkpoint-dir", ck, "--log", log}), concat(kLong, {"--checkpoint-dir", ck, "--log", log})},
                          30);
  auto ranks = [&](size_t i) -> dp::test::WorkerProcess& { return job[static_cast<int>(i)]; };
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (last_step(read_jsonl_so_far(log)) < 3 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < 2; ++i)
      while (ranks(i).read_line(milliseconds(1))) {
      }
  }
  ASSERT_GE(last_step(read_jsonl_so_far(log)), 3) << job.outputs();
  job[0].signal(SIGHUP);
  EXPECT_EQ(wait_all(ranks, 2, milliseconds(60000)), (std::vector<int>{129, 129})) << job.outputs();
  const auto stop = events(read_jsonl(log), "stop");
  ASSERT_EQ(stop.size(), 1u) << job.outputs();
  const int64_t at = stop[0].at("step").get<int64_t>();
  ASSERT_LT(at, 60) << "the run ended before the signal";
  EXPECT_EQ(checkpoint_step(ck), at);
  EXPECT_TRUE(contains(job[0].output(), "stopped by SIGHUP (its terminal or SSH session closed) (all 2 processes) at step " + std::to_string(at)))
      << job.outputs();
}

TEST_F(DpTrainDdp, SetupFailureOnOneRankStopsEveryRank) {
  const std::string missing = dir.file("missing.safetensors");
  Ranks r = run_ranks({kSmall, concat(kSmall, {"--init", missing})});
  EXPECT_EQ(r.status, (std::vector<int>{2, 2})) << r.all();
  EXPECT_TRUE(contains(r.output[1], "dp-train: rank 1: error: --init " + missing)) << r.all();
  EXPECT_TRUE(contains(r.output[0], "dp-train: rank 0: error: rank 1 could not set up the run")) << r.all();
}

// The global batch's loss is the same on every rank, so a diverging run stops every rank at the
// same step with exit status 3, and the error goes to the launcher's error file.
TEST_F(DpTrainDdp, DivergenceStopsEveryRankAndIsRecordedForTheLauncher) {
  const std::string error_file = dir.file("error.json");
  Ranks r = run_world(2, concat(kSmall, {"--lr", "1e30"}), {"DP_ERROR_FILE=" + error_file});
  EXPECT_EQ(r.status, (std::vector<int>{3, 3})) << r.all();
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_TRUE(contains(r.output[static_cast<size_t>(rank)], "dp-train: rank " + std::to_string(rank) + ": error during training: the loss is"))
        << r.all();
  const auto recorded = dp::distributed::read_error_file(error_file);
  ASSERT_TRUE(recorded.has_value()) << r.all();
  EXPECT_EQ(recorded->type, "Error");
  EXPECT_TRUE(contains(recorded->message, "training diverged; try a lower --lr")) << recorded->message;
}

// 50 rows in batches of 7: each epoch's last batch has 1 row, so on 2 processes rank 1 has no share
// of it, on 3 ranks 1 and 2 have none. They run out one step early and shadow that step in a Join
// (DDP's collectives with no rows, then the same optimizer step), so the run is one process's and
// the checkpoint after each epoch (which checks that every rank's state is identical, optimizer
// state included) is written. A batch smaller than the world is still refused.
TEST_F(DpTrainDdp, ALastBatchWithFewerRowsThanRanksIsShadowedInAJoin) {
  const std::vector<std::string> args = concat(kSmall, {"--data-size", "50"});
  Result one = run(concat(args, {"--save", dir.file("u1.safetensors"), "--log", dir.file("u1.jsonl")}), dir, "one");
  ASSERT_EQ(one.status, 0) << describe(one);
  for (int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " processes");
    const std::string w = dir.file("u" + std::to_string(world) + ".safetensors"), log = dir.file("u" + std::to_string(world) + ".jsonl");
    const std::string ck = dir.file("uck" + std::to_string(world));
    Ranks r = run_world(world, concat(args, {"--save", w, "--log", log, "--checkpoint-dir", ck}));
    for (int s : r.status) ASSERT_EQ(s, 0) << r.all();
    EXPECT_TRUE(contains(r.output[0], "finished: 16 steps (2 epochs) of batch 7")) << r.output[0];
    const auto steps = events(read_jsonl(log), "step");
    ASSERT_EQ(steps.size(), 16u);
    EXPECT_EQ(steps[7].at("rows"), 1);
    const auto ours = step_losses(log), single = step_losses(dir.file("u1.jsonl"));
    ASSERT_EQ(ours.size(), single.size());
    for (size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(ours[i], single[i], 1e-5) << "step " << i + 1;
    const double diff = max_abs_diff(w, dir.file("u1.safetensors"));
    EXPECT_LT(diff, 1e-5);
    std::printf("%d processes (last batch 1 row) vs 1: max |weight difference| %g after 16 SGD steps\n", world, diff);
    EXPECT_EQ(checkpoint_step(ck), 16);
  }
  Ranks tiny = run_world(2, concat(kSmall, {"--batch-size", "1"}));
  EXPECT_EQ(tiny.status, (std::vector<int>{2, 2})) << tiny.all();
  EXPECT_TRUE(contains(tiny.output[1], "--batch-size 1 is smaller than the 2 processes")) << tiny.all();
}

TEST_F(DpTrainDdp, DistributedFlagWithoutALauncherSaysWhatToSet) {
  Result r = run(concat(kSmall, {"--distributed"}), dir);
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "dp-train: error: --distributed: ")) << r.err;
}

// ---- PyTorch ------------------------------------------------------------------------------------

// test_dp_train_ddp_torch.h: 3 SGD steps on two processes (each batch split 32+32, then 33+32 with
// two devices each) end on PyTorch's single-process losses and weights; here the test starts the
// ranks with a launcher's environment itself.
TEST_F(DpTrainDdp, SgdStepsOnTwoProcessesMatchPyTorch) {
  DP_TRAIN_REQUIRE_FASHION_MNIST();
  std::string why;
  const std::string python = torch_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  expect_sgd_steps_match_pytorch(
      python, dir, [](const std::vector<std::string>& args, const std::vector<std::string>& env) { return run_world(2, args, env); }, "WorkerJob");
}

}  // namespace
