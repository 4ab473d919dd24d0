// The gloo process group across real processes on 127.0.0.1: each rank is a pg_worker process
// (workers/pg_worker.cpp) that forms its group with init_process_group() through a TCPStore
// served by this test (DP_STORE_HOSTED=1, as dp-run does). Results of the collectives, and the
// failures a job meets: a rank SIGKILLed (PeerLostError naming it within 1 s), a rank SIGSTOPped
// (CollectiveTimeout naming it as behind, at the timeout), a rank that skips a collective, and
// ranks that issue different collectives under DP_DISTRIBUTED_DEBUG=1.
#include <gtest/gtest.h>
#include <signal.h>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>
#include "distributed/workers/worker_job.h"
#include "dp/distributed/store.h"

#ifndef DP_PG_WORKER
#error "DP_PG_WORKER (the path of the pg_worker program) is set by tests/CMakeLists.txt"
#endif

namespace dp::distributed {
namespace {

using dp::test::mono_ms;
using std::chrono::milliseconds;

// A job: the store server and one pg_worker per rank, each running its scenario.
class Job : public dp::test::WorkerJob {
 public:
  Job(const std::vector<std::string>& scenarios, double timeout_seconds, const std::vector<std::string>& extra_env = {})
      : WorkerJob(DP_PG_WORKER, one_argument_each(scenarios), timeout_seconds, extra_env) {}

 private:
  static std::vector<std::vector<std::string>> one_argument_each(const std::vector<std::string>& scenarios) {
    std::vector<std::vector<std::string>> args;
    for (const std::string& s : scenarios) args.push_back({s});
    return args;
  }
};

// The value of "name=value" in a worker's line ("" when absent).
std::string field(const std::string& line, const std::string& name) {
  const std::regex re("(^| )" + name + "=([^ ]*)");
  std::smatch m;
  return std::regex_search(line, m, re) ? m[2].str() : "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr milliseconds kStartup{15000};

TEST(ProcessGroupProcesses, TwoAndThreeProcessesComputeEveryCollective) {
  for (int size : {2, 3}) {
    Job job(std::vector<std::string>(static_cast<size_t>(size), "collectives"), 10);
    for (int r = 0; r < size; ++r) {
      const std::optional<int> status = job[r].wait_exit(milliseconds(20000));
      ASSERT_TRUE(status.has_value()) << "rank " << r << " of " << size << " did not finish\n" << job.outputs();
      EXPECT_EQ(*status, 0) << "rank " << r << " of " << size << "\n" << job.outputs();
      EXPECT_FALSE(contains(job[r].output(), "FAIL")) << job.outputs();
      EXPECT_TRUE(contains(job[r].output(), "PASS reduce_scatter sum float32")) << job.outputs();
      EXPECT_TRUE(contains(job[r].output(), dp::detail::str("PASS broadcast from ", size - 1))) << job.outputs();
    }
  }
}

TEST(ProcessGroupProcesses, ASigkilledRankIsNamedByEverySurvivorWithinOneSecond) {
  // Ranks 0 and 1 wait in an allreduce that rank 2 never joins; then rank 2 is killed. The
  // allreduce runs through shared memory (the survivors see the process exit) or, with DP_SHM=0,
  // through TCP (they see the connection close).
  for (const bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared memory" : "TCP");
    Job job({"survivor", "survivor", "idle"}, 20, {shm ? "DP_SHM=1" : "DP_SHM=0"});
    for (int r = 0; r < 3; ++r) ASSERT_TRUE(job[r].wait_for_line("READY", kStartup)) << "rank " << r << "\n" << job.outputs();
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(job[r].wait_for_line("ENTER", milliseconds(5000))) << job.outputs();
    std::this_thread::sleep_for(milliseconds(300));
    const int64_t killed_at = mono_ms();
    job[2].signal(SIGKILL);
    for (int r = 0; r < 2; ++r) {
      const std::optional<std::string> error = job[r].wait_for_line("ERROR", milliseconds(5000));
      ASSERT_TRUE(error) << "rank " << r << " reported nothing\n" << job.outputs();
      EXPECT_TRUE(contains(*error, "ERROR PeerLostError peer=2 op=allreduce seq=2")) << *error;
      EXPECT_LE(std::stoll(field(*error, "mono_ms")) - killed_at, 1000) << *error;
      EXPECT_TRUE(contains(*error, dp::detail::str("allreduce #2 (rank ", r, " of 3, group 'default'): lost rank 2 (", shm ? "pid " : "127.0.0.1:")))
          << *error;
      const std::optional<std::string> next = job[r].wait_for_line("NEXT", milliseconds(5000));
      ASSERT_TRUE(next) << job.outputs();
      EXPECT_TRUE(contains(*next, "NEXT PeerLostError peer=2")) << *next;
      EXPECT_TRUE(contains(*next, dp::detail::str(":: process group 'default' (rank ", r, " of 3) is unusable after an earlier error: allreduce #2")))
          << *next;
    }
    for (int r = 0; r < 2; ++r) {
      const std::optional<int> status = job[r].wait_exit(milliseconds(10000));
      ASSERT_TRUE(status) << job.outputs();
      EXPECT_EQ(*status, 0) << job.outputs();
    }
  }
}

TEST(ProcessGroupProcesses, AStoppedRankIsNamedAsBehindWhenTheCollectiveTimesOut) {
  Job job({"survivor", "idle"}, 3);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(job[r].wait_for_line("READY", kStartup)) << job.outputs();
  std::this_thread::sleep_for(milliseconds(300));  // its progress reaches the store (at most 50 ms apart)
  job[1].signal(SIGSTOP);
  const std::optional<std::string> enter = job[0].wait_for_line("ENTER", milliseconds(5000));
  ASSERT_TRUE(enter) << job.outputs();
  const std::optional<std::string> error = job[0].wait_for_line("ERROR", milliseconds(10000));
  job[1].signal(SIGKILL);
  ASSERT_TRUE(error) << job.outputs();
  EXPECT_TRUE(contains(*error, "ERROR CollectiveTimeout op=allreduce seq=2")) << *error;
  EXPECT_EQ(field(*error, "behind"), "1") << *error;
  const int64_t waited = std::stoll(field(*error, "mono_ms")) - std::stoll(field(*enter, "mono_ms"));
  EXPECT_GE(waited, 2900) << *error;
  EXPECT_LE(waited, 5000) << *error;
  EXPECT_TRUE(contains(*error, "rank 1 is behind; rank 1 is at collective #1 (broadcast, finished")) << *error;
  EXPECT_TRUE(contains(*error, "this rank waited")) << *error;
  const std::optional<std::string> next = job[0].wait_for_line("NEXT", milliseconds(5000));
  ASSERT_TRUE(next) << job.outputs();
  EXPECT_TRUE(contains(*next, "NEXT CollectiveTimeout")) << *next;
  EXPECT_TRUE(contains(*next, "is unusable after an earlier error")) << *next;
}

TEST(ProcessGroupProcesses, ARankThatSkipsACollectiveIsNamedInTheTimeout) {
  // Rank 1 skips the allreduce and waits in a barrier: both time out (2 s), and each names the other
  // as being in a different collective at the same number.
  Job job({"survivor", "skip_to_barrier"}, 2);
  const std::optional<std::string> e0 = job[0].wait_for_line("ERROR", kStartup);
  const std::optional<std::string> e1 = job[1].wait_for_line("ERROR", kStartup);
  ASSERT_TRUE(e0 && e1) << job.outputs();
  EXPECT_TRUE(contains(*e0, "ERROR CollectiveTimeout op=allreduce seq=2")) << *e0;
  EXPECT_TRUE(contains(*e0, "rank 1 issued barrier as collective #2, this rank allreduce")) << *e0;
  EXPECT_TRUE(contains(*e1, "ERROR CollectiveTimeout op=barrier seq=2")) << *e1;
  EXPECT_TRUE(contains(*e1, "rank 0 issued allreduce as collective #2, this rank barrier")) << *e1;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(job[r].wait_exit(milliseconds(10000)), std::optional<int>(0)) << job.outputs();
}

TEST(ProcessGroupProcesses, DebugModeNamesTheRankThatIssuedADifferentCollective) {
  Job job({"mismatch", "mismatch"}, 5, {"DP_DISTRIBUTED_DEBUG=1"});
  for (int r = 0; r < 2; ++r) {
    const std::optional<std::string> error = job[r].wait_for_line("ERROR", kStartup);
    ASSERT_TRUE(error) << job.outputs();
    EXPECT_TRUE(contains(*error, "ERROR CollectiveMismatch rank=1")) << *error;
    EXPECT_TRUE(contains(*error, "rank 1 issued broadcast(float32[10]; root 0) as collective #1, rank 0 issued allreduce(float32[10]; sum)"))
        << *error;
    EXPECT_EQ(job[r].wait_exit(milliseconds(10000)), std::optional<int>(0)) << job.outputs();
  }
}

}  // namespace
}  // namespace dp::distributed
