// dp-run when workers fail, each case bounded in time: a rank killed with SIGKILL mid-step (dp-run
// reports it within 2 s; both survivors raise PeerLostError naming it within 1 s, and none dies of
// SIGPIPE), a stopped rank (a named timeout
// within the timeout + 2 s), a rank that skips a backward (the report gives both ranks' positions),
// a rank that never starts (a rendezvous error naming it), a crash, a worker that ignores SIGTERM
// (SIGKILL after the grace period), and dp-run itself killed (no worker left 1 s later).
#include <gtest/gtest.h>
#include <signal.h>
#include "tools/test_dp_run_util.h"

namespace {

using namespace dp_run_test;

constexpr milliseconds kRun{40000};

TEST(DpRunFailures, AKilledRankIsReportedWithin2sAndTheJobEndsWithin3s) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(job({"--nproc-per-node", "3", "--timeout", "20"}, {"--steps", "100000"}));
  const std::vector<pid_t> pids = wait_ready(*run, 3, kRun);
  ASSERT_EQ(pids.size(), 3u) << run->output();
  ASSERT_TRUE(run->wait_for_line("STEP 5 ", kRun)) << run->output();
  const int64_t killed_at = mono_ms();
  ::kill(pids[1], SIGKILL);  // mid-step: the ranks step back to back
  const auto report = run->wait_for_line("dp-run: rank 1 ", milliseconds(10000));
  const int64_t reported_at = mono_ms();
  ASSERT_TRUE(report.has_value()) << run->output();
  EXPECT_TRUE(std::regex_search(
      *report, std::regex("^dp-run: rank 1 \\(node 0, local 1, pid " + std::to_string(pids[1]) + "\\) was killed by SIGKILL after [0-9.]+ s$")))
      << *report;
  EXPECT_LE(reported_at - killed_at, 2000) << "dp-run reported the killed rank after " << reported_at - killed_at << " ms";
  ASSERT_EQ(run->wait_exit(milliseconds(15000)), 1) << run->output();
  const int64_t ended_at = mono_ms();
  // The survivors end by themselves (PeerLostError): the job is over well before the 20 s timeout.
  EXPECT_LE(ended_at - killed_at, 3000) << run->output();
  const std::string out = run->output();
  int64_t slowest_survivor = 0;
  int named = 0;
  for (int r : {0, 2}) {
    SCOPED_TRACE("survivor " + std::to_string(r));
    const std::string line = report_of(out, r);
    EXPECT_FALSE(contains(line, "SIGPIPE")) << line;  // dp-run starts workers with SIGPIPE ignored
    std::string error;
    for (const std::string& e : lines_starting(out, "ERROR "))
      if (field(e, "rank") == r) error = e;
    // Each survivor names rank 1 by itself: the one that talked to it directly, and the one blocked
    // on the other survivor, which told it before closing its connections (the group's failure notice).
    ASSERT_FALSE(error.empty()) << "survivor " << r << " recorded no error\n" << out;
    EXPECT_TRUE(contains(error, "ERROR PeerLostError")) << error;
    EXPECT_TRUE(contains(error, "lost rank 1 (")) << error;
    if (contains(error, "lost rank 1 (")) ++named;
    EXPECT_LE(field(error, "mono_ms") - killed_at, 1000) << error;
    slowest_survivor = std::max(slowest_survivor, field(error, "mono_ms") - killed_at);
    // dp-run's line for the survivor carries the error the survivor recorded.
    EXPECT_TRUE(contains(line, "exited with status 3 after")) << line;
    EXPECT_TRUE(contains(line, ": PeerLostError: ")) << line;
  }
  EXPECT_TRUE(contains(
      out, "dp-run: job failed (exit status 1); first failure: rank 1 (node 0, local 1, pid " + std::to_string(pids[1]) + ") was killed by SIGKILL"))
      << out;
  std::printf("[ measured ] kill -> dp-run's report %lld ms; %d of 2 survivors named rank 1, the slowest after %lld ms; dp-run ended after %lld ms\n",
              static_cast<long long>(reported_at - killed_at), named, static_cast<long long>(slowest_survivor),
              static_cast<long long>(ended_at - killed_at));
}

TEST(DpRunFailures, AStoppedRankIsANamedTimeoutWithinTheTimeoutPlus2s) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "2"}, {"--steps", "100000"}));
  const std::vector<pid_t> pids = wait_ready(*run, 2, kRun);
  ASSERT_EQ(pids.size(), 2u) << run->output();
  ASSERT_TRUE(run->wait_for_line("STEP 3 ", kRun)) << run->output();
  const int64_t stopped_at = mono_ms();
  ::kill(pids[1], SIGSTOP);
  const auto report = run->wait_for_line("dp-run: rank 0 ", milliseconds(15000));
  const int64_t reported_at = mono_ms();
  ASSERT_TRUE(report.has_value()) << run->output();
  EXPECT_TRUE(contains(*report, "exited with status 3 after")) << *report;
  EXPECT_TRUE(contains(*report, ": CollectiveTimeout: ")) << *report;
  EXPECT_TRUE(contains(*report, "rank 1 is behind")) << *report;
  EXPECT_LE(reported_at - stopped_at, 2000 + 2000) << *report;
  // The stopped rank is continued and terminated by dp-run, not left stopped.
  ASSERT_EQ(run->wait_exit(milliseconds(15000)), 1) << run->output();
  EXPECT_TRUE(
      std::regex_search(report_of(run->output(), 1), std::regex("pid " + std::to_string(pids[1]) + "\\) was stopped by dp-run \\(SIGTERM\\)")))
      << run->output();
  EXPECT_TRUE(process_gone(pids[1]));
  std::printf("[ measured ] SIGSTOP -> dp-run's report of the timeout %lld ms (timeout 2000 ms)\n", static_cast<long long>(reported_at - stopped_at));
}

TEST(DpRunFailures, ARankThatSkipsABackwardIsReportedWithBothRanksPositions) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(
      job({"--nproc-per-node", "2", "--timeout", "2"}, {"--steps", "100", "--fail-rank", "1", "--fail-at", "3", "--fail-how", "skip-backward"}));
  ASSERT_TRUE(run->wait_for_line("SKIPPED 3 rank=1", kRun)) << run->output();
  ASSERT_EQ(run->wait_exit(milliseconds(20000)), 1) << run->output();
  const std::string line = report_of(run->output(), 0);
  // "... CollectiveTimeout: allreduce #9 (rank 0 of 2, group 'default') timed out: rank 1 is behind; rank 1 is at
  //  step 3 (forward), collective #8 (...); this rank (at step 3 (backward)) waited 2144 ms in allreduce #9 ..."
  EXPECT_TRUE(contains(line, ": CollectiveTimeout: ")) << line;
  EXPECT_TRUE(std::regex_search(line, std::regex("rank 1 is at step 3 \\(forward\\), collective #[0-9]+"))) << line;
  EXPECT_TRUE(std::regex_search(line, std::regex("this rank \\(at step 3 \\(backward\\)\\) waited [0-9]+ ms in allreduce #[0-9]+"))) << line;
  EXPECT_TRUE(contains(report_of(run->output(), 1), "was stopped by dp-run (SIGTERM)")) << run->output();
}

TEST(DpRunFailures, ARankThatNeverStartsIsNamedInARendezvousError) {
  DP_RUN_REQUIRE_BINARY();
  const int64_t start = mono_ms();
  auto run = start_dp_run(job({"--nproc-per-node", "3", "--timeout", "2"}, {"--steps", "5", "--fail-rank", "1", "--fail-how", "never-start"}));
  ASSERT_EQ(run->wait_exit(milliseconds(20000)), 1) << run->output();
  EXPECT_LT(mono_ms() - start, 2000 + 1000 + 1000 + 5000) << "the rendezvous timeout, the settling second, a margin for a loaded machine";
  const std::string out = run->output();
  for (int r : {0, 2}) {
    const std::string line = report_of(out, r);
    EXPECT_TRUE(contains(line, "exited with status 3 after")) << line;
    EXPECT_TRUE(contains(line, ": RendezvousError: ")) << line;
    EXPECT_TRUE(contains(line, "rank 1 did not arrive")) << line;
  }
  EXPECT_TRUE(contains(report_of(out, 1), "was stopped by dp-run (SIGTERM)")) << out;
  // Whichever of the two timed out first.
  EXPECT_TRUE(std::regex_search(out, std::regex("first failure: rank [02] \\(node 0, local [02], pid [0-9]+\\) exited with status 3 after [0-9.]+ s: "
                                                "RendezvousError: ")))
      << out;
}

TEST(DpRunFailures, ACrashIsTheFirstFailureNotThePeersItTookDown) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(
      job({"--nproc-per-node", "3", "--timeout", "20"}, {"--steps", "100", "--fail-rank", "2", "--fail-at", "3", "--fail-how", "abort"}));
  ASSERT_EQ(run->wait_exit(kRun), 1) << run->output();
  const std::string out = run->output();
  EXPECT_TRUE(std::regex_search(report_of(out, 2), std::regex("was killed by SIGABRT after [0-9.]+ s"))) << out;
  // The peers lost it (or, where Gloo left them waiting in a send, were stopped by dp-run).
  for (int r : {0, 1})
    EXPECT_TRUE(contains(report_of(out, r), ": PeerLostError: ") || contains(report_of(out, r), "was stopped by dp-run (SIGTERM)")) << out;
  EXPECT_TRUE(contains(out, "dp-run: job failed (exit status 1); first failure: rank 2 (node 0, local 2, pid ")) << out;
}

TEST(DpRunFailures, AWorkerThatIgnoresSigtermIsKilledAfterTheGracePeriod) {
  DP_RUN_REQUIRE_BINARY();
  // Rank 1 hangs at step 2 with a SIGTERM handler that only sets a flag it never reads again.
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "2", "--grace", "1"},
                              {"--steps", "100", "--on-signal", "--fail-rank", "1", "--fail-at", "2", "--fail-how", "hang"}));
  ASSERT_TRUE(run->wait_for_line("dp-run: rank 0 ", kRun)) << run->output();
  const int64_t first_report = mono_ms();
  ASSERT_EQ(run->wait_exit(milliseconds(15000)), 1) << run->output();
  const int64_t took = mono_ms() - first_report;
  EXPECT_TRUE(std::regex_search(report_of(run->output(), 1), std::regex("was killed by SIGKILL after [0-9.]+ s \\(after dp-run's SIGTERM\\)$")))
      << run->output();
  EXPECT_GE(took, 1000 + 1000 - 100) << "1 s to settle and 1 s of grace before SIGKILL";
  EXPECT_LE(took, 1000 + 1000 + 3000);
}

TEST(DpRunFailures, NoWorkerIsLeftASecondAfterDpRunIsKilled) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "20"}, {"--steps", "100000", "--step-ms", "5"}));
  const std::vector<pid_t> pids = wait_ready(*run, 2, kRun);
  ASSERT_EQ(pids.size(), 2u) << run->output();
  run->signal(SIGKILL);
  ASSERT_TRUE(run->wait_exit(milliseconds(5000)).has_value());
  const int64_t killed_at = mono_ms();
  bool all_gone = false;
  while (!all_gone && mono_ms() - killed_at < 1000) {
    all_gone = process_gone(pids[0]) && process_gone(pids[1]);
    if (!all_gone) ::usleep(10'000);
  }
  EXPECT_TRUE(all_gone) << "workers " << pids[0] << ", " << pids[1] << " outlived dp-run by a second";
  // (If one did, end it here: a test leaves nothing behind.)
  for (pid_t p : pids)
    if (!process_gone(p)) ::kill(p, SIGKILL);
  std::printf("[ measured ] dp-run killed -> workers gone after %lld ms\n", static_cast<long long>(mono_ms() - killed_at));
}

}  // namespace
