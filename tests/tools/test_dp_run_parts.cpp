// dp-run's parts that need no processes, compiled in (tools/CMakeLists.txt): the report lines, the
// choice of the first failure, each worker's environment and core share, the timeline merge, the
// command line, and finding the program.
#include <gtest/gtest.h>

#ifndef DP_RUN_BIN
// tools/ not built (DP_BUILD_TOOLS=OFF): dp-run's sources are not compiled in.
TEST(DpRunParts, NotBuilt) { GTEST_SKIP() << "dp-run is not built (configure with -DDP_BUILD_TOOLS=ON)"; }
#else
#include <sys/wait.h>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include "options.h"
#include "process.h"
#include "report.h"
#include "support/temp_files.h"
#include "timeline_merge.h"
#include "worker_env.h"

namespace dp::run {
namespace {

// waitpid's status for an exit with `code`, or a death by `sig`.
int exited(int code) { return (code & 0xff) << 8; }
int killed(int sig) { return sig & 0x7f; }

WorkerExit worker(int rank, int status, double seconds = 12.34) {
  WorkerExit w;
  w.rank = rank;
  w.node = 1;
  w.local_rank = rank % 2;
  w.pid = 4240 + rank;
  w.seconds = seconds;
  w.wait_status = status;
  return w;
}

TEST(DpRunReport, OneLinePerWorkerWithTheRecordedError) {
  EXPECT_EQ(describe(worker(1, killed(SIGKILL))), "rank 1 (node 1, local 1, pid 4241) was killed by SIGKILL after 12.3 s");
  WorkerExit w = worker(0, exited(3), 12.44);
  w.error = dp::distributed::RecordedError{"PeerLostError", "allreduce #42 (rank 0 of 2, group 'default'): lost rank 1\nsecond line", 0, 0};
  EXPECT_EQ(describe(w),
            "rank 0 (node 1, local 0, pid 4240) exited with status 3 after 12.4 s: PeerLostError: allreduce #42 (rank 0 of 2, group "
            "'default'): lost rank 1 | second line");
  EXPECT_EQ(describe(worker(2, exited(4))), "rank 2 (node 1, local 0, pid 4242) exited with status 4 after 12.3 s (no error recorded)");
  // 143 without an error and without dp-run's SIGTERM: the ranks stopped together on a signal that
  // came elsewhere; a consequence, not a first failure.
  EXPECT_EQ(describe(worker(2, exited(143))),
            "rank 2 (node 1, local 0, pid 4242) exited with status 143 after 12.3 s (128 + SIGTERM: it stopped on a stop signal, its own or "
            "another rank's) (no error recorded)");
  EXPECT_TRUE(is_consequence(worker(2, exited(143))));
  EXPECT_FALSE(is_consequence(worker(2, exited(4))));
  WorkerExit stopped = worker(3, killed(SIGTERM));
  stopped.stop_signal = SIGTERM;
  EXPECT_EQ(describe(stopped), "rank 3 (node 1, local 1, pid 4243) was stopped by dp-run (SIGTERM) after 12.3 s");
  WorkerExit stubborn = worker(3, killed(SIGKILL));
  stubborn.stop_signal = SIGTERM;
  EXPECT_EQ(describe(stubborn), "rank 3 (node 1, local 1, pid 4243) was killed by SIGKILL after 12.3 s (after dp-run's SIGTERM)");
  WorkerExit interrupted = worker(0, exited(130));
  interrupted.stop_signal = SIGINT;
  EXPECT_EQ(describe(interrupted), "rank 0 (node 1, local 0, pid 4240) exited with status 130 after 12.3 s (after dp-run's SIGINT)");
  EXPECT_FALSE(failed(worker(0, exited(0))));
  EXPECT_TRUE(failed(worker(0, exited(1))));
  EXPECT_TRUE(failed(worker(0, killed(SIGSEGV))));
  EXPECT_EQ(shell_status(killed(SIGKILL)), 137);
  EXPECT_EQ(one_line(std::string(5000, 'x'), 10), "xxxxxxxxxx ...");
}

TEST(DpRunReport, TheFirstFailureIsACauseNotAConsequence) {
  WorkerExit lost0 = worker(0, exited(3)), lost2 = worker(2, exited(3)), crashed = worker(1, killed(SIGABRT));
  lost0.error = lost2.error = dp::distributed::RecordedError{"PeerLostError", "lost rank 1", 0, 0};
  EXPECT_EQ(pick_first_failure({lost0, crashed, lost2}), 1u);
  EXPECT_EQ(pick_first_failure({lost0, lost2}), 0u);  // only consequences: the first collected
  EXPECT_EQ(pick_first_failure({crashed, lost0}), 0u);
  EXPECT_EQ(pick_first_failure({}), std::string::npos);
}

TEST(DpRunEnvironment, LauncherVariablesAndTheCoreShare) {
  AttemptEnv a;
  a.world_size = 4;
  a.nproc_local = 2;
  a.node_rank = 1;
  a.nnodes = 2;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.run_id = "job";
  a.restart_count = 2;
  a.max_restarts = 3;
  a.store_prefix = "job/attempt2";
  a.timeout_s = 2.5;
  a.cpu_share = 3;
  WorkerEnv w{3, 1, "/tmp/e.json", "/tmp/t.json"};
  const std::vector<std::string> inherited{"PATH=/bin", "RANK=9", "DP_CPU_DEVICES=5", "HOME=/root", "DP_TIMELINE=/outer.json"};
  const std::vector<std::string> env = worker_environment(inherited, a, w);
  auto value = [&](const char* name) { return env_value(env, name).value_or("<unset>"); };
  EXPECT_EQ(value("RANK"), "3");
  EXPECT_EQ(value("LOCAL_RANK"), "1");
  EXPECT_EQ(value("WORLD_SIZE"), "4");
  EXPECT_EQ(value("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(value("GROUP_RANK"), "1");
  EXPECT_EQ(value("MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(value("MASTER_PORT"), "29500");
  EXPECT_EQ(value("DP_STORE_HOSTED"), "1");
  EXPECT_EQ(value("DP_STORE_PREFIX"), "job/attempt2");
  EXPECT_EQ(value("DP_RESTART_COUNT"), "2");
  EXPECT_EQ(value("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(value("DP_RUN_ID"), "job");
  EXPECT_EQ(value("DP_ERROR_FILE"), "/tmp/e.json");
  EXPECT_EQ(value("DP_TIMELINE"), "/tmp/t.json");
  EXPECT_EQ(value("DP_DIST_TIMEOUT"), "2.5");
  EXPECT_EQ(value("DP_CPU_DEVICES"), "5");  // the user's
  EXPECT_EQ(value("OPENBLAS_NUM_THREADS"), "3");
  EXPECT_EQ(value("OMP_NUM_THREADS"), "3");
  EXPECT_EQ(value("PATH"), "/bin");
  EXPECT_EQ(std::count_if(env.begin(), env.end(), [](const std::string& e) { return e.rfind("RANK=", 0) == 0; }), 1);
  // Without --timeline an outer DP_TIMELINE is not passed on (every rank would write one file).
  w.timeline_file.clear();
  a.timeout_s.reset();
  const std::vector<std::string> plain = worker_environment(inherited, a, w);
  EXPECT_FALSE(env_value(plain, "DP_TIMELINE"));
  EXPECT_FALSE(env_value(plain, "DP_DIST_TIMEOUT"));

  EXPECT_EQ(cpu_share(2, 2), 1);
  EXPECT_EQ(cpu_share(8, 2), 4);
  EXPECT_EQ(cpu_share(8, 3), 2);
  EXPECT_EQ(cpu_share(2, 4), 1);
  EXPECT_GE(available_cores(), 1);
}

TEST(DpRunTimeline, MergesRanksAndNamesThem) {
  dp::test::TempDir dir;
  dp::test::write_bytes(dir.file("r0"),
                        "[\n{\"name\": \"backward\", \"ph\": \"X\", \"ts\": 10, \"dur\": 5, \"pid\": 0, \"tid\": 0},\n"
                        "{\"name\": \"allreduce bucket 0\", \"ph\": \"X\", \"ts\": 12, \"dur\": 2, \"pid\": 0, \"tid\": 1},\n");
  // Rank 1 was killed while writing: its last line is cut.
  dp::test::write_bytes(dir.file("r1"),
                        "[\n{\"name\": \"backward\", \"ph\": \"X\", \"ts\": 11, \"dur\": 4, \"pid\": 1, \"tid\": 0},\n{\"name\": \"bac");
  const std::string out = dir.file("trace.json");
  const MergeResult m = merge_timelines({{dir.file("r0"), 0, 0}, {dir.file("r1"), 1, 1}, {dir.file("missing"), 2, 1}}, out);
  EXPECT_EQ(m.events, 3u);
  EXPECT_EQ(m.dropped, 1u);
  EXPECT_EQ(m.ranks_without, std::vector<int>{2});
  const nlohmann::json j = nlohmann::json::parse(dp::test::read_bytes(out));
  int events = 0;
  std::map<int, std::string> names;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M") {
      if (e.at("name") == "process_name") names[e.at("pid").get<int>()] = e.at("args").at("name").get<std::string>();
    } else {
      ++events;
    }
  }
  EXPECT_EQ(events, 3);
  EXPECT_EQ(names[0], "rank 0 (node 0)");
  EXPECT_EQ(names[1], "rank 1 (node 1)");
  EXPECT_EQ(names[2], "rank 2 (node 1)");
  EXPECT_THROW(merge_timelines({}, dir.file("no/such/dir/trace.json")), std::runtime_error);
}

ParseResult parse(std::vector<std::string> args) {
  args.insert(args.begin(), "dp-run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

TEST(DpRunOptions, TheProgramAndItsArgumentsAreKeptWhole) {
  auto r = parse({"--nproc-per-node", "2", "--max-restarts", "3", "--", "./train", "--lr", "0.1", "--nproc-per-node", "9"});
  ASSERT_TRUE(r.options.has_value());
  EXPECT_EQ(r.options->nproc_per_node, 2);
  EXPECT_EQ(r.options->max_restarts, 3);
  EXPECT_EQ(r.options->command, (std::vector<std::string>{"./train", "--lr", "0.1", "--nproc-per-node", "9"}));
  EXPECT_EQ(r.options->master(), "127.0.0.1");
  EXPECT_EQ(r.options->master_port, -1);
  // Without "--" the first word that is not an option starts the program.
  r = parse({"--nproc-per-node", "2", "python3", "-u", "train.py"});
  ASSERT_TRUE(r.options.has_value());
  EXPECT_EQ(r.options->command, (std::vector<std::string>{"python3", "-u", "train.py"}));
  // Several nodes: node 0's default port; the job's token must be given (a file, or DP_STORE_TOKEN).
  r = parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--token-file", "job.token", "--", "x"});
  ASSERT_TRUE(r.options.has_value());
  EXPECT_EQ(r.options->master_port, 29500);
  EXPECT_EQ(r.options->token_file, "job.token");
  ::unsetenv("DP_STORE_TOKEN");
  EXPECT_EQ(parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--", "x"}).exit_code, 2);
  EXPECT_FALSE(parse({"--grace", "-1", "--", "x"}).options.has_value());
  EXPECT_EQ(parse({"--timeout", "0", "--", "x"}).exit_code, 2);
  EXPECT_TRUE(valid_run_id("job-1.a_b"));
  EXPECT_FALSE(valid_run_id(""));
  EXPECT_FALSE(valid_run_id("a/b"));
  EXPECT_FALSE(valid_run_id(std::string(65, 'a')));
}

TEST(DpRunProcess, FindsTheProgramAndSaysWhyNot) {
  EXPECT_EQ(resolve_program("sh", "/nonexistent:/bin:/usr/bin"), "/bin/sh");
  EXPECT_EQ(resolve_program("/bin/sh", ""), "/bin/sh");
  try {
    resolve_program("no-such-program-xyz", "/bin");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "cannot run 'no-such-program-xyz': no such program in PATH");
  }
  EXPECT_THROW(resolve_program("/etc/passwd", ""), std::runtime_error);  // not executable
  // exec's own failure comes back as an error, and the child is reaped.
  try {
    spawn_process("/proc/self/cwd", {"x"}, {});
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(std::string(e.what()).rfind("cannot run '/proc/self/cwd': ", 0) == 0) << e.what();
  }
  // A started program is in its own process group and gets the environment it was given.
  const pid_t pid =
      spawn_process("/bin/sh", {"sh", "-c", "set -- $(cat /proc/$$/stat); test \"$5\" = $$ && test \"$X\" = y"}, {"X=y", "PATH=/bin:/usr/bin"});
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
}

}  // namespace
TEST(DpRunOptions, StoreLimitsAreParsedAndNamedWhenWrong) {
  auto r = parse({"--store-limit", "value-bytes=16M", "--store-limit", "total-bytes=2G", "--store-limit", "connections=100", "--store-limit",
                  "handshake-timeout=2.5", "--store-bind", "0.0.0.0", "--", "x"});
  ASSERT_TRUE(r.options.has_value());
  EXPECT_EQ(r.options->store_limits.max_value_bytes, size_t{16} << 20);
  EXPECT_EQ(r.options->store_limits.max_total_bytes, size_t{2} << 30);
  EXPECT_EQ(r.options->store_limits.max_connections, 100u);
  EXPECT_EQ(r.options->store_limits.handshake_timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(r.options->store_limits.max_key_bytes, size_t{8} << 10);  // the default, untouched
  EXPECT_EQ(r.options->store_bind, "0.0.0.0");
  dp::distributed::TCPStoreServerOptions limits;
  std::string error;
  EXPECT_FALSE(apply_store_limit("value-bytes=1G", limits, &error));
  EXPECT_NE(error.find("--store-limit value-bytes=1G: not a number in [1, 67108864]"), std::string::npos) << error;
  EXPECT_FALSE(apply_store_limit("speed=9", limits, &error));
  EXPECT_NE(error.find("not NAME=VALUE with NAME one of key-bytes"), std::string::npos) << error;
  EXPECT_FALSE(apply_store_limit("connections=-3", limits, &error));
  EXPECT_EQ(parse({"--store-limit", "key-bytes=lots", "--", "x"}).exit_code, 2);
}

}  // namespace dp::run
#endif  // DP_RUN_BIN
