// dp-run with several nodes: one dp-run per node, meeting through the store node 0's dp-run hosts.
// On loopback (any user): two nodes train like one, a failure on one node stops the other through
// the store, restarts agree on the attempt, a node that never comes or a node rank given twice is a
// named start error. As two "machines" (root, network namespaces the test creates and removes,
// joined by a veth pair): the same job matches one node, and cutting the link mid-run ends both
// nodes with a named timeout.
#include <gtest/gtest.h>
#include <unistd.h>
#include <cstring>
#include "dp/dp.h"
#include "support/run_command.h"
#include "support/two_hosts.h"
#include "support/temp_files.h"
#include "tools/test_dp_run_util.h"

namespace {

using namespace dp_run_test;
using dp::test::run_command;

constexpr milliseconds kRun{40000};

// dp-run as node `node` of `nnodes` at 127.0.0.1:port.
std::vector<std::string> node_options(int node, int nnodes, int port, int nproc, std::vector<std::string> more = {}) {
  std::vector<std::string> o{"--nnodes",      std::to_string(nnodes), "--node-rank",      std::to_string(node),  "--master-addr", "127.0.0.1",
                             "--master-port", std::to_string(port),   "--nproc-per-node", std::to_string(nproc), "--token-file",  token_file()};
  o.insert(o.end(), more.begin(), more.end());
  return o;
}

// Both files hold the same tensors, byte for byte.
void expect_same_weights(const std::string& a_path, const std::string& b_path) {
  auto a = dp::load(a_path), b = dp::load(b_path);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& item : a) {
    ASSERT_TRUE(b.contains(item.key())) << item.key();
    ASSERT_EQ(item.value().nbytes(), b[item.key()].nbytes()) << item.key();
    EXPECT_EQ(std::memcmp(item.value().data_ptr(), b[item.key()].data_ptr(), item.value().nbytes()), 0) << item.key();
  }
}

TEST(DpRunNodes, TwoNodesOnLoopbackTrainLikeOne) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TempDir dir;
  const int port = free_port();
  const std::vector<std::string> worker{"--steps", "6", "--save", dir.file("two")};
  auto n1 = start_dp_run(job(node_options(1, 2, port, 2, {"--timeout", "20"}), worker));
  auto n0 = start_dp_run(job(node_options(0, 2, port, 1, {"--timeout", "20"}), worker));
  ASSERT_EQ(n0->wait_exit(kRun), 0) << n0->output() << n1->output();
  ASSERT_EQ(n1->wait_exit(kRun), 0) << n0->output() << n1->output();
  // Ranks follow the nodes: node 0 has rank 0, node 1 ranks 1 and 2, of 3.
  EXPECT_TRUE(contains(n0->output(), "dp-run: node 0: started rank 0 of 3")) << n0->output();
  EXPECT_TRUE(contains(n1->output(), "dp-run: node 1: started ranks 1-2 of 3")) << n1->output();
  EXPECT_TRUE(contains(n1->output(), "store 127.0.0.1:" + std::to_string(port) + " (node 0's)")) << n1->output();
  EXPECT_TRUE(contains(n0->output(), "dp-run: all 3 workers on 2 nodes exited with status 0")) << n0->output();
  auto one = start_dp_run(job({"--nproc-per-node", "3", "--timeout", "20"}, {"--steps", "6", "--save", dir.file("one")}));
  ASSERT_EQ(one->wait_exit(kRun), 0) << one->output();
  for (int r = 0; r < 3; ++r) expect_same_weights(dir.file("two." + std::to_string(r)), dir.file("one." + std::to_string(r)));
}

TEST(DpRunNodes, AFailureOnOneNodeStopsTheOtherThroughTheStore) {
  DP_RUN_REQUIRE_BINARY();
  const int port = free_port();
  // Programs that never talk to each other: only the store tells node 0 that node 1 failed.
  auto n0 = start_dp_run(node_options(0, 2, port, 1, {"--", "/bin/sleep", "30"}));
  auto n1 = start_dp_run(node_options(1, 2, port, 1, {"--", "/bin/sh", "-c", "sleep 1; exit 9"}));
  ASSERT_TRUE(n1->wait_for_line("dp-run: rank 1 ", kRun)) << n1->output() << n0->output();
  const int64_t failed_at = mono_ms();
  const auto heard = n0->wait_for_line("dp-run: node 1 failed: ", milliseconds(10000));
  ASSERT_TRUE(heard.has_value()) << n0->output();
  const int64_t latency = mono_ms() - failed_at;
  EXPECT_LE(latency, 1000) << "node 0 polls the failure key every 100 ms";
  std::printf("[ measured ] node 1 reported its failure -> node 0 stopped its workers %lld ms later\n", static_cast<long long>(latency));
  ASSERT_EQ(n1->wait_exit(kRun), 1) << n1->output() << n0->output();
  EXPECT_TRUE(std::regex_search(*heard, std::regex("node 1 failed: rank 1 \\(node 1, local 0, pid [0-9]+\\) exited with status 9 after [0-9.]+ s "
                                                   "\\(no error recorded\\); stopping this node's workers")))
      << *heard;
  ASSERT_EQ(n0->wait_exit(milliseconds(15000)), 1) << n0->output();
  EXPECT_TRUE(contains(report_of(n0->output(), 0), "was stopped by dp-run (SIGTERM)")) << n0->output();
  for (auto* n : {n0.get(), n1.get()})
    EXPECT_TRUE(contains(n->output(), "dp-run: job failed (exit status 1); first failure: rank 1 (node 1, local 0, pid ")) << n->output();
}

TEST(DpRunNodes, ACrashOnOneNodeIsTheFirstFailureOnBoth) {
  DP_RUN_REQUIRE_BINARY();
  const int port = free_port();
  const std::vector<std::string> worker{"--steps", "100", "--fail-rank", "2", "--fail-at", "3", "--fail-how", "abort"};
  auto n0 = start_dp_run(job(node_options(0, 2, port, 1, {"--timeout", "20"}), worker));
  auto n1 = start_dp_run(job(node_options(1, 2, port, 2, {"--timeout", "20"}), worker));
  ASSERT_EQ(n0->wait_exit(kRun), 1) << n0->output() << n1->output();
  ASSERT_EQ(n1->wait_exit(kRun), 1) << n0->output() << n1->output();
  const std::string survivor = report_of(n0->output(), 0);
  EXPECT_TRUE(contains(survivor, ": PeerLostError: ") || contains(survivor, "was stopped by dp-run (SIGTERM)")) << n0->output();
  EXPECT_TRUE(contains(report_of(n1->output(), 2), "was killed by SIGABRT")) << n1->output();
  for (auto* n : {n0.get(), n1.get()}) EXPECT_TRUE(contains(n->output(), "first failure: rank 2 (node 1, local 1, pid ")) << n->output();
}

TEST(DpRunNodes, RestartsAcrossNodesAgreeOnTheAttempt) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TempDir dir;
  const int port = free_port();
  const std::vector<std::string> worker{"--steps",   "6", "--checkpoint", dir.file("ckpt"), "--fail-rank",    "1",
                                        "--fail-at", "3", "--fail-how",   "exit:7",         "--fail-restart", "0"};
  // Node 0's restart limit is the job's.
  auto n0 = start_dp_run(job(node_options(0, 2, port, 1, {"--timeout", "10", "--max-restarts", "1"}), worker));
  auto n1 = start_dp_run(job(node_options(1, 2, port, 1, {"--timeout", "10", "--max-restarts", "9"}), worker));
  ASSERT_EQ(n0->wait_exit(kRun), 0) << n0->output() << n1->output();
  ASSERT_EQ(n1->wait_exit(kRun), 0) << n0->output() << n1->output();
  for (auto* n : {n0.get(), n1.get()}) {
    EXPECT_TRUE(contains(n->output(), "restarting every worker (restart 1 of 1)")) << n->output();
    EXPECT_TRUE(std::regex_search(n->output(), std::regex("READY rank=[01] pid=[0-9]+ restart=1 "))) << n->output();
    EXPECT_TRUE(std::regex_search(n->output(), std::regex("RESUMED rank=[01] step=3\n"))) << n->output();
  }
}

TEST(DpRunNodes, ANodeThatNeverComesIsNamed) {
  DP_RUN_REQUIRE_BINARY();
  const int port = free_port();
  const int64_t start = mono_ms();
  auto n0 = start_dp_run(node_options(0, 3, port, 1, {"--rdzv-timeout", "2", "--", "/bin/true"}));
  ASSERT_EQ(n0->wait_exit(kRun), 3) << n0->output();
  EXPECT_LT(mono_ms() - start, 2000 + 3000);
  EXPECT_TRUE(contains(n0->output(),
                       "dp-run: node rendezvous failed: nodes 1, 2 did not join within the --rdzv-timeout (store 127.0.0.1:" + std::to_string(port)))
      << n0->output();
  // A node whose node 0 never comes says where it looked.
  auto lonely = start_dp_run(node_options(1, 2, free_port(), 1, {"--rdzv-timeout", "1", "--", "/bin/true"}));
  ASSERT_EQ(lonely->wait_exit(kRun), 3) << lonely->output();
  EXPECT_TRUE(contains(lonely->output(), "node 1 could not reach the store at 127.0.0.1:")) << lonely->output();
}

TEST(DpRunNodes, ANodeRankGivenTwiceIsRefused) {
  DP_RUN_REQUIRE_BINARY();
  const int port = free_port();
  auto n0 = start_dp_run(node_options(0, 2, port, 1, {"--", "/bin/sleep", "2"}));
  auto a = start_dp_run(node_options(1, 2, port, 1, {"--", "/bin/sleep", "2"}));
  ASSERT_TRUE(a->wait_for_line("dp-run: node 1: started", kRun)) << a->output() << n0->output();
  auto b = start_dp_run(node_options(1, 2, port, 1, {"--", "/bin/sleep", "2"}));
  ASSERT_EQ(b->wait_exit(kRun), 3) << b->output();
  EXPECT_TRUE(contains(b->output(), "dp-run: node rank 1 is taken: another dp-run joined the job as node 1")) << b->output();
  EXPECT_EQ(n0->wait_exit(kRun), 0) << n0->output();
  EXPECT_EQ(a->wait_exit(kRun), 0) << a->output();
}

// dp-run as node `node` in its namespace: `ip netns exec <ns> dp-run ...` (ip execs dp-run itself).
std::unique_ptr<WorkerProcess> dp_run_on(const dp::test::TwoHosts& hosts, int node, int port, const std::vector<std::string>& options,
                                         const std::vector<std::string>& worker_args) {
  std::vector<std::string> args{
      "netns",          "exec",          hosts.ns(node),       kDpRun,         "--nnodes",  "2", "--node-rank", std::to_string(node), "--master-addr",
      hosts.address(0), "--master-port", std::to_string(port), "--token-file", token_file()};
  args.insert(args.end(), options.begin(), options.end());
  args.push_back("--");
  args.push_back(kWorker);
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  for (const char* name : {"DP_CPU_DEVICES", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "DP_TIMELINE", "DP_DIST_TIMEOUT", "RANK", "WORLD_SIZE"})
    ::unsetenv(name);
  return std::make_unique<WorkerProcess>("/usr/sbin/ip", args, clean_env());
}

#define REQUIRE_TWO_HOSTS(hosts) \
  if (!(hosts).ok()) GTEST_SKIP() << (hosts).error()

TEST(DpRunTwoMachines, TwoNodesInTwoNamespacesTrainLikeOneNode) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TwoHosts hosts("dr", 232, 0);
  REQUIRE_TWO_HOSTS(hosts);
  dp::test::TempDir dir;
  const int port = 29400 + ::getpid() % 500;  // node 0's own namespace: nothing else listens there
  auto n0 = dp_run_on(hosts, 0, port, {"--nproc-per-node", "1", "--timeout", "20"}, {"--steps", "6", "--save", dir.file("two")});
  auto n1 = dp_run_on(hosts, 1, port, {"--nproc-per-node", "1", "--timeout", "20"}, {"--steps", "6", "--save", dir.file("two")});
  ASSERT_EQ(n0->wait_exit(kRun), 0) << n0->output() << n1->output();
  ASSERT_EQ(n1->wait_exit(kRun), 0) << n0->output() << n1->output();
  EXPECT_TRUE(contains(n1->output(), "store " + hosts.address(0) + ":" + std::to_string(port) + " (node 0's)")) << n1->output();
  EXPECT_TRUE(contains(n0->output(), "dp-run: all 2 workers on 2 nodes exited with status 0")) << n0->output();
  auto one = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "20"}, {"--steps", "6", "--save", dir.file("one")}));
  ASSERT_EQ(one->wait_exit(kRun), 0) << one->output();
  for (int r = 0; r < 2; ++r) expect_same_weights(dir.file("two." + std::to_string(r)), dir.file("one." + std::to_string(r)));
}

TEST(DpRunTwoMachines, CuttingTheLinkEndsBothNodesWithANamedTimeout) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TwoHosts hosts("dr", 232, 1);
  REQUIRE_TWO_HOSTS(hosts);
  const int port = 29900 + ::getpid() % 500;
  const std::vector<std::string> options{"--nproc-per-node", "1", "--timeout", "3", "--grace", "2"};
  const std::vector<std::string> worker{"--steps", "100000", "--step-ms", "10"};
  auto n0 = dp_run_on(hosts, 0, port, options, worker);
  auto n1 = dp_run_on(hosts, 1, port, options, worker);
  ASSERT_TRUE(n0->wait_for_line("STEP 3 ", kRun)) << n0->output() << n1->output();
  const int64_t cut_at = mono_ms();
  hosts.partition();
  // Each node reports its rank's CollectiveTimeout: the timeout, the diagnosis (its store reads
  // time out too on node 1), a step in flight.
  int64_t slowest = 0;
  for (int node = 0; node < 2; ++node) {
    WorkerProcess& n = node == 0 ? *n0 : *n1;
    const auto line = n.wait_for_line("dp-run: rank " + std::to_string(node) + " ", milliseconds(20000));
    ASSERT_TRUE(line.has_value()) << "node " << node << ":\n" << n.output();
    EXPECT_TRUE(contains(*line, ": CollectiveTimeout: ")) << *line;
    slowest = std::max(slowest, mono_ms() - cut_at);
    EXPECT_LE(mono_ms() - cut_at, 3000 + 2000 + 2000 + 1000) << *line;
  }
  // Both dp-runs end by themselves: node 0 waits a bounded time for node 1's word, node 1 finds the store gone.
  for (auto* n : {n0.get(), n1.get()}) {
    const auto status = n->wait_exit(milliseconds(30000));
    ASSERT_TRUE(status.has_value()) << n->output();
    EXPECT_EQ(*status, 1) << n->output();
  }
  // Each summary names the cut as the first failure, before the timeouts it caused.
  EXPECT_TRUE(
      std::regex_search(n0->output(), std::regex("first failure: node 1('s dp-run|: its dp-run) stopped answering.*network to (it|node 1) is cut")))
      << n0->output();
  EXPECT_TRUE(std::regex_search(n1->output(), std::regex("first failure: this node lost the store at " + hosts.address(0) + ":[0-9]+: .*network")))
      << n1->output();
  std::printf("[ measured ] link cut -> both nodes reported the timeout within %lld ms; both dp-runs ended %lld ms after the cut\n",
              static_cast<long long>(slowest), static_cast<long long>(mono_ms() - cut_at));
}

}  // namespace
