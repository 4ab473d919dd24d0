// dp-run end to end on one node: the environment each worker gets, a DDP job that matches one
// process, the exit statuses (bad arguments, a program that cannot run, a taken port), restarts
// that resume from a checkpoint, Ctrl-C reaching the workers, and the merged timeline.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <cstring>
#include <filesystem>
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include "distributed/reducer_buckets.h"
#include "distributed/workers/ddp_worker_model.h"
#include "dp/dp.h"
#include "dp/optim/optim.h"
#include "support/temp_files.h"
#include "tools/test_dp_run_util.h"

namespace {

using namespace dp_run_test;

constexpr milliseconds kRun{40000};

// The weights of `steps` plain SGD steps (lr 0.1) of ddp_worker's model on the whole global batch:
// what every rank of dp_run_worker must end with.
dp::nn::TensorDict reference_weights(int steps) {
  dp::nn::Sequential model = dp::test::make_ddp_worker_model(42);
  dp::optim::SGD opt(model->parameters(), dp::optim::SGDOptions(0.1));
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = dp::test::ddp_worker_batch(step);
    opt.zero_grad();
    dp::cross_entropy(model(x), y).backward();
    opt.step();
  }
  return model->state_dict();
}

// Every rank's saved weights are identical to each other and close to the reference.
void expect_weights(const std::string& save, int world, const dp::nn::TensorDict& reference) {
  auto first = dp::load(save + ".0");
  for (int r = 0; r < world; ++r) {
    auto mine = dp::load(save + "." + std::to_string(r));
    for (const auto& item : reference) {
      ASSERT_TRUE(mine.contains(item.key())) << item.key();
      EXPECT_EQ(std::memcmp(mine[item.key()].data_ptr(), first[item.key()].data_ptr(), item.value().nbytes()), 0)
          << "rank " << r << " " << item.key();
      EXPECT_TRUE(dp::allclose(mine[item.key()], item.value(), 1e-5, 1e-6)) << "rank " << r << " " << item.key();
    }
  }
}

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

TEST(DpRun, GivesEachWorkerTheLauncherEnvironment) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "2.5", "--run-id", "envtest"}, {"--print-env"}));
  ASSERT_EQ(run->wait_exit(kRun), 0) << run->output();
  const std::string out = run->output();
  // "dp-run: run envtest: node 0 of 1, 2 workers, store 127.0.0.1:<port> (hosted here), ..."
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("store 127\\.0\\.0\\.1:([0-9]+) \\(hosted here\\)"))) << out;
  const std::string port = m[1].str();
  std::map<std::string, std::string> env[2];
  for (const std::string& line : lines_starting(out, "ENV ")) {
    std::smatch e;
    ASSERT_TRUE(std::regex_match(line, e, std::regex("ENV ([01]) ([A-Z_]+)=(.*)"))) << line;
    env[std::stoi(e[1].str())][e[2].str()] = e[3].str();
  }
  const std::string share = std::to_string(std::max(1, cores() / 2));
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(env[r]["RANK"], std::to_string(r));
    EXPECT_EQ(env[r]["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env[r]["WORLD_SIZE"], "2");
    EXPECT_EQ(env[r]["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env[r]["GROUP_RANK"], "0");
    EXPECT_EQ(env[r]["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env[r]["MASTER_PORT"], port);
    EXPECT_EQ(env[r]["DP_STORE_HOSTED"], "1");
    EXPECT_EQ(env[r]["DP_RUN_ID"], "envtest");
    EXPECT_EQ(env[r]["DP_RESTART_COUNT"], "0");
    EXPECT_EQ(env[r]["DP_STORE_PREFIX"], "envtest/attempt0");
    EXPECT_EQ(env[r]["DP_DIST_TIMEOUT"], "2.5");
    EXPECT_EQ(env[r]["DP_CPU_DEVICES"], share);
    EXPECT_EQ(env[r]["OPENBLAS_NUM_THREADS"], share);
    EXPECT_EQ(env[r]["OMP_NUM_THREADS"], share);
    EXPECT_EQ(env[r]["DP_TIMELINE"], "<unset>");
    EXPECT_TRUE(contains(env[r]["DP_ERROR_FILE"], "rank" + std::to_string(r))) << env[r]["DP_ERROR_FILE"];
    EXPECT_EQ(env[r]["TORCHELASTIC_ERROR_FILE"], env[r]["DP_ERROR_FILE"]);
  }
  EXPECT_NE(env[0]["DP_ERROR_FILE"], env[1]["DP_ERROR_FILE"]);
  // The store's token: a fresh 64-character one, the same for every worker, in their environment
  // only: not in dp-run's output.
  EXPECT_TRUE(contains(env[0]["DP_STORE_TOKEN"], "64 characters, fingerprint ")) << env[0]["DP_STORE_TOKEN"];
  EXPECT_EQ(env[0]["DP_STORE_TOKEN"], env[1]["DP_STORE_TOKEN"]);
  // The scratch directory of the error files is gone with dp-run.
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(env[0]["DP_ERROR_FILE"]).parent_path()));
}

TEST(DpRun, AUsersCoreSettingsWin) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(job({"--nproc-per-node", "2"}, {"--print-env"}), {"DP_CPU_DEVICES=3", "OPENBLAS_NUM_THREADS=2"});
  ASSERT_EQ(run->wait_exit(kRun), 0) << run->output();
  const std::string share = std::to_string(std::max(1, cores() / 2));
  for (int r = 0; r < 2; ++r) {
    const std::string tag = "ENV " + std::to_string(r) + " ";
    EXPECT_TRUE(contains(run->output(), tag + "DP_CPU_DEVICES=3\n")) << run->output();
    EXPECT_TRUE(contains(run->output(), tag + "OPENBLAS_NUM_THREADS=2\n")) << run->output();
    EXPECT_TRUE(contains(run->output(), tag + "OMP_NUM_THREADS=" + share + "\n")) << run->output();
  }
}

TEST(DpRun, ATwoProcessJobMatchesOneProcess) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TempDir dir;
  const std::string save = dir.file("final");
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "20"}, {"--steps", "6", "--save", save}));
  ASSERT_EQ(run->wait_exit(kRun), 0) << run->output();
  EXPECT_TRUE(contains(run->output(), "dp-run: all 2 workers exited with status 0")) << run->output();
  expect_weights(save, 2, reference_weights(6));
}

TEST(DpRun, BadArgumentsExitWith2AndNameTheOption) {
  DP_RUN_REQUIRE_BINARY();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", "0", "--", "true"}, "--nproc-per-node 0"},
      {{"--nproc-per-node", "2"}, "no program to run"},
      {{"--nprocs", "2", "--", "true"}, "unknown option --nprocs"},
      {{"--nnodes", "2", "--node-rank", "0", "--", "true"}, "--nnodes 2 needs --master-addr"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1", "--", "true"}, "--node-rank 2 is not in [0, 2)"},
      {{"--master-port", "70000", "--", "true"}, "--master-port 70000"},
      {{"--run-id", "a/b", "--", "true"}, "--run-id 'a/b'"},
  };
  for (const auto& [args, message] : cases) {
    auto run = start_dp_run(args);
    EXPECT_EQ(run->wait_exit(kRun), 2) << run->output();
    EXPECT_TRUE(contains(run->output(), message)) << "expected '" << message << "' in:\n" << run->output();
  }
}

TEST(DpRun, AProgramThatCannotRunExitsWith3) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TempDir dir;
  dp::test::write_bytes(dir.file("not-executable"), "#!/bin/sh\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/nonexistent/program", "cannot run '/nonexistent/program': No such file or directory"},
      {"no-such-program-in-path", "cannot run 'no-such-program-in-path': no such program in PATH"},
      {dir.file("not-executable"), "it is not an executable file"},
  };
  for (const auto& [program, message] : cases) {
    auto run = start_dp_run({"--nproc-per-node", "2", "--", program});
    EXPECT_EQ(run->wait_exit(kRun), 3) << run->output();
    EXPECT_TRUE(contains(run->output(), message)) << run->output();
  }
}

TEST(DpRun, ATakenPortIsNamedAndNothingStarts) {
  DP_RUN_REQUIRE_BINARY();
  // Another "job" listens on a port of 127.0.0.1.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  const int64_t start = mono_ms();
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--master-port", port}, {"--steps", "2"}));
  const auto status = run->wait_exit(kRun);
  ::close(fd);
  EXPECT_EQ(status, 3) << run->output();
  EXPECT_LT(mono_ms() - start, 5000);
  const auto lines = lines_starting(run->output(), "dp-run: cannot host the store on 127.0.0.1:" + port + ": ");
  ASSERT_EQ(lines.size(), 1u) << run->output();
  EXPECT_TRUE(contains(lines[0], "already in use")) << lines[0];
  EXPECT_FALSE(contains(run->output(), "READY")) << run->output();
  // Without --master-port dp-run picks a free port itself: the same job runs.
  auto free_run = start_dp_run(job({"--nproc-per-node", "2"}, {"--steps", "2"}));
  EXPECT_EQ(free_run->wait_exit(kRun), 0) << free_run->output();
}

TEST(DpRun, AFailedProgramWithoutAnErrorFileIsReportedSo) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run({"--nproc-per-node", "2", "--", "/bin/sh", "-c", "exit 4"});
  EXPECT_EQ(run->wait_exit(kRun), 1) << run->output();
  for (int r = 0; r < 2; ++r) {
    const std::string line = report_of(run->output(), r);
    EXPECT_TRUE(std::regex_search(line, std::regex("^dp-run: rank " + std::to_string(r) + " \\(node 0, local " + std::to_string(r) +
                                                   ", pid [0-9]+\\) exited with status 4 after [0-9.]+ s \\(no error recorded\\)$")))
        << run->output();
  }
  EXPECT_TRUE(contains(run->output(), "dp-run: job failed (exit status 1); first failure: rank ")) << run->output();
}

TEST(DpRun, RestartsResumeFromTheCheckpointAndFinishTheRun) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TempDir dir;
  const std::string save = dir.file("final");
  // Rank 1 exits with status 7 at step 4 of the first attempt only; every step writes a checkpoint.
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "10", "--max-restarts", "2", "--run-id", "rs"},
                              {"--steps", "8", "--checkpoint", dir.file("ckpt.safetensors"), "--save", save, "--fail-rank", "1", "--fail-at", "4",
                               "--fail-how", "exit:7", "--fail-restart", "0"}));
  ASSERT_EQ(run->wait_exit(kRun), 0) << run->output();
  const std::string out = run->output();
  EXPECT_TRUE(std::regex_search(out, std::regex("dp-run: rank 1 \\(node 0, local 1, pid [0-9]+\\) exited with status 7"))) << out;
  EXPECT_TRUE(contains(out, "dp-run: attempt 0 failed (first failure: rank 1 ")) << out;
  EXPECT_TRUE(contains(out, "restarting every worker (restart 1 of 2)")) << out;
  EXPECT_TRUE(contains(out, "started ranks 0-1 of 2 (pids ")) << out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(std::regex_search(out, std::regex("READY rank=" + std::to_string(r) + " pid=[0-9]+ restart=1 "))) << out;
    EXPECT_TRUE(contains(out, "RESUMED rank=" + std::to_string(r) + " step=4\n")) << out;
  }
  EXPECT_TRUE(contains(out, "dp-run: all 2 workers exited with status 0")) << out;
  EXPECT_TRUE(contains(out, "1 restart)")) << out;
  // Plain SGD resumed from the weights after step 3 ends where an uninterrupted run ends.
  expect_weights(save, 2, reference_weights(8));
}

TEST(DpRun, RestartsAreLimited) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "5", "--max-restarts", "1"},
                              {"--steps", "50", "--fail-rank", "0", "--fail-at", "1", "--fail-how", "throw"}));
  ASSERT_EQ(run->wait_exit(kRun), 1) << run->output();
  const std::string out = run->output();
  EXPECT_EQ(lines_starting(out, "dp-run: attempt 0 failed").size(), 1u) << out;
  EXPECT_TRUE(contains(out, "dp-run: job failed (exit status 1) after 1 restart; first failure: rank 0 ")) << out;
  // The error rank 0 recorded is in its line: the type and the message.
  EXPECT_TRUE(contains(out, "exited with status 3 after")) << out;
  EXPECT_TRUE(contains(out, ": ValueError: dp_run_worker: rank 0 was told to fail at step 1")) << out;
}

TEST(DpRun, CtrlCReachesTheWorkersWhichCheckpointAndExit) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TempDir dir;
  const std::string ckpt = dir.file("ckpt.safetensors");
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "10", "--grace", "10"},
                              {"--steps", "100000", "--step-ms", "20", "--on-signal", "--checkpoint", ckpt}));
  ASSERT_FALSE(wait_ready(*run, 2, kRun).empty()) << run->output();
  ASSERT_TRUE(run->wait_for_line("STEP 2 ", kRun)) << run->output();
  const int64_t sent = mono_ms();
  run->signal(SIGINT);  // what the terminal's Ctrl-C sends dp-run (the workers are in their own process groups)
  const auto status = run->wait_exit(milliseconds(20000));
  ASSERT_EQ(status, 130) << run->output();
  EXPECT_LT(mono_ms() - sent, 8000) << "stopped at a step's end, not by the 10 s SIGKILL";
  const std::string out = run->output();
  EXPECT_TRUE(contains(out, "dp-run: got SIGINT: passing it to the 2 running workers")) << out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(contains(out, "STOPPED rank=" + std::to_string(r) + " signal=2\n")) << out;
    EXPECT_TRUE(std::regex_search(report_of(out, r), std::regex("exited with status 130 after [0-9.]+ s \\(after dp-run's SIGINT\\): Interrupted: ")))
        << out;
  }
  EXPECT_TRUE(contains(out, "dp-run: stopped by SIGINT (exit status 130)")) << out;
  EXPECT_TRUE(std::filesystem::exists(ckpt));
}

// 3 steps with one bucket per parameter (--bucket-mb tiny): each rank's trace has every step's
// forward, backward, optimizer step and wait, and each bucket's ready point and all-reduce span for
// each step, ready no later than the launch that starts the span.
TEST(DpRun, TimelineMergesEveryRanksTrace) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TempDir dir;
  const std::string timeline = dir.file("trace.json");
  constexpr int kSteps = 3;
  constexpr double kBucketMb = 1e-6;
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeline", timeline}, {"--steps", std::to_string(kSteps), "--bucket-mb", "0.000001"}));
  ASSERT_EQ(run->wait_exit(kRun), 0) << run->output();
  EXPECT_TRUE(contains(run->output(), "dp-run: timeline: ")) << run->output();
  // The buckets DDP makes of the worker's model with that size.
  const int buckets = static_cast<int>(dp::distributed::plan_buckets(dp::test::make_ddp_worker_model(42)->parameters(), kBucketMb, kBucketMb).size());
  ASSERT_GT(buckets, 1);
  const nlohmann::json trace = nlohmann::json::parse(dp::test::read_bytes(timeline));
  ASSERT_TRUE(trace.contains("traceEvents")) << trace.dump().substr(0, 500);
  std::map<int, std::map<std::string, int>> names;  // per rank, event name -> count
  std::map<int, std::string> process_names;
  // Per rank, step and bucket: the ready point, and the all-reduce's start (its launch) and end.
  std::map<std::tuple<int, int, int>, std::array<int64_t, 3>> times;
  for (const auto& e : trace["traceEvents"]) {
    const int pid = e.at("pid").get<int>();
    const std::string name = e.at("name").get<std::string>();
    if (name == "process_name") process_names[pid] = e.at("args").at("name").get<std::string>();
    ++names[pid][name];
    if (e.at("ph") == "X") {
      EXPECT_GE(e.at("dur").get<int64_t>(), 0);
    }
    const bool ready = std::regex_match(name, std::regex("bucket [0-9]+ ready")),
               reduce = std::regex_match(name, std::regex("allreduce bucket [0-9]+"));
    if (!ready && !reduce) continue;
    const nlohmann::json& args = e.at("args");
    EXPECT_EQ(args.at("rank").get<int>(), pid) << e.dump();
    EXPECT_EQ(e.at("tid").get<int>(), ready ? 0 : 1) << e.dump();
    auto& t = times.try_emplace({pid, args.at("step").get<int>(), args.at("bucket").get<int>()}, std::array<int64_t, 3>{-1, -1, -1}).first->second;
    if (ready) {
      t[0] = e.at("ts").get<int64_t>();
    } else {
      t[1] = e.at("ts").get<int64_t>();
      t[2] = t[1] + e.at("dur").get<int64_t>();
    }
  }
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(process_names[r], "rank " + std::to_string(r) + " (node 0)");
    EXPECT_EQ(names[r]["forward and loss"], kSteps);
    EXPECT_EQ(names[r]["backward"], kSteps);
    EXPECT_EQ(names[r]["wait for buckets"], kSteps);
    EXPECT_EQ(names[r]["optimizer.step"], kSteps);  // the worker's own span
    for (int b = 0; b < buckets; ++b) {
      EXPECT_EQ(names[r]["bucket " + std::to_string(b) + " ready"], kSteps) << "bucket " << b;
      EXPECT_EQ(names[r]["allreduce bucket " + std::to_string(b)], kSteps) << "bucket " << b;
      for (int step = 0; step < kSteps; ++step) {
        const auto it = times.find({r, step, b});
        ASSERT_NE(it, times.end()) << "step " << step << " bucket " << b;
        const auto& [ready, launch, done] = it->second;
        EXPECT_GE(ready, 0) << "step " << step << " bucket " << b << ": no ready point";
        EXPECT_LE(ready, launch) << "step " << step << " bucket " << b;
        EXPECT_LE(launch, done) << "step " << step << " bucket " << b;
      }
    }
    EXPECT_EQ(names[r].count("bucket " + std::to_string(buckets) + " ready"), 0u) << "more buckets than planned";
  }
  EXPECT_EQ(times.size(), static_cast<size_t>(2 * kSteps * buckets));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"trace.json"});
}

}  // namespace
