// DistributedDataParallel between two "machines": each rank in its own network namespace, joined by
// a veth pair (10.x.y.1 and 10.x.y.2), rank 0 hosting the store on its own address, as on two hosts
// (no loopback between them). Shows that each rank binds the interface that routes to MASTER_ADDR,
// that training matches the single process there too, and that a partition (the link goes down:
// no connection is closed, nothing arrives) ends in a CollectiveTimeout in both ranks, not a hang.
// Needs root (network namespaces); skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <vector>
#include "distributed/workers/ddp_worker_model.h"
#include "distributed/workers/worker_process.h"
#include "dp/dp.h"
#include "dp/optim/optim.h"
#include "support/two_hosts.h"
#include "support/temp_files.h"

#ifndef DP_DDP_WORKER
#error "DP_DDP_WORKER (the path of the ddp_worker program) is set by tests/CMakeLists.txt"
#endif

namespace dp::distributed {
namespace {

using dp::test::mono_ms;
using dp::test::TwoHosts;
using dp::test::WorkerProcess;
using std::chrono::milliseconds;

// Rank r of 2 in host r: `ip netns exec <ns> ddp_worker args...`, rank 0 hosting the store.
std::unique_ptr<WorkerProcess> start_rank(const TwoHosts& hosts, int r, const std::vector<std::string>& worker_args, double timeout_s, int port) {
  std::vector<std::string> args{"netns", "exec", hosts.ns(r), DP_DDP_WORKER};
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  std::vector<std::string> env{"RANK=" + std::to_string(r),
                               "WORLD_SIZE=2",
                               "MASTER_ADDR=" + hosts.address(0),
                               "MASTER_PORT=" + std::to_string(port),
                               "DP_DIST_TIMEOUT=" + std::to_string(timeout_s),
                               "DP_STORE_HOSTED=0",
                               "DP_STORE_TOKEN=two-machines-token-0123456789abcdef",
                               "DP_CPU_DEVICES=1",
                               "OPENBLAS_NUM_THREADS=1"};
  return std::make_unique<WorkerProcess>("/usr/sbin/ip", args, env);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
int64_t field_ms(const std::string& line) {
  std::smatch m;
  return std::regex_search(line, m, std::regex("mono_ms=([0-9]+)")) ? std::stoll(m[1].str()) : -1;
}

#define REQUIRE_TWO_HOSTS(hosts) \
  if (!(hosts).ok()) GTEST_SKIP() << (hosts).error()

TEST(DDPTwoMachines, EachRankBindsItsOwnAddressAndTrainingMatchesOneProcess) {
  TwoHosts hosts("dd", 231, 0);
  REQUIRE_TWO_HOSTS(hosts);
  dp::test::TempDir dir;
  const std::string save = (dir.path / "final").string();
  const std::vector<std::string> args{"--steps", "6", "--rows-of-rank", "7,5", "--save", save};
  const int port = 29400 + ::getpid() % 500;  // rank 0's own namespace: nothing else listens there
  auto r0 = start_rank(hosts, 0, args, 20, port);
  auto r1 = start_rank(hosts, 1, args, 20, port);
  for (auto* w : {r0.get(), r1.get()}) {
    auto status = w->wait_exit(milliseconds(60000));
    ASSERT_TRUE(status.has_value()) << w->output();
    ASSERT_EQ(*status, 0) << w->output();
  }
  EXPECT_TRUE(contains(r0->output(), "BOUND " + hosts.address(0) + "\n")) << r0->output();
  EXPECT_TRUE(contains(r1->output(), "BOUND " + hosts.address(1) + "\n")) << r1->output();
  // The same weights on both hosts, and those of one process over the concatenated batch.
  nn::Sequential reference = test::make_ddp_worker_model(42);
  optim::SGD opt(reference->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 6; ++step) {
    auto [x, y] = test::ddp_worker_batch(step);
    opt.zero_grad();
    cross_entropy(reference(x), y).backward();
    opt.step();
  }
  auto a = dp::load(save + ".0"), b = dp::load(save + ".1");
  for (const auto& item : reference->state_dict()) {
    ASSERT_TRUE(a.contains(item.key()) && b.contains(item.key())) << item.key();
    EXPECT_EQ(std::memcmp(a[item.key()].data_ptr(), b[item.key()].data_ptr(), item.value().nbytes()), 0) << item.key();
    EXPECT_TRUE(allclose(a[item.key()], item.value(), 1e-5, 1e-6)) << item.key();
  }
}

TEST(DDPTwoMachines, APartitionIsATimeoutInBothRanksNotAHang) {
  TwoHosts hosts("dd", 231, 1);
  REQUIRE_TWO_HOSTS(hosts);
  const std::vector<std::string> args{"--steps", "100000"};
  const int port = 29900 + ::getpid() % 500;
  auto r0 = start_rank(hosts, 0, args, 3, port);
  auto r1 = start_rank(hosts, 1, args, 3, port);
  ASSERT_TRUE(r0->wait_for_line("STEP 3", milliseconds(30000))) << r0->output() << r1->output();
  const int64_t cut_at = mono_ms();
  hosts.partition();
  for (auto* w : {r0.get(), r1.get()}) {
    auto error = w->wait_for_line("ERROR", milliseconds(15000));
    ASSERT_TRUE(error.has_value()) << "no error after the partition\n" << w->output();
    EXPECT_TRUE(contains(*error, "CollectiveTimeout")) << *error;
    EXPECT_LE(field_ms(*error) - cut_at, 3000 + 2000 + 1000) << *error;  // the timeout, the diagnosis, a step in flight
    EXPECT_EQ(w->wait_exit(milliseconds(10000)), 3) << w->output();
  }
}

}  // namespace
}  // namespace dp::distributed
