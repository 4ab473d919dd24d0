// DistributedDataParallel with every rank a process (ddp_worker), over TCP on 127.0.0.1 with the
// store in the test: 2 and 3 processes end on bitwise the same weights, equal to the single-process
// run of the concatenated batch (ragged shares included); a SIGKILLed rank is named in the survivor
// within a second; a rank that skips a backward is named in the timeout.
#include <gtest/gtest.h>
#include <chrono>
#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <vector>
#include "distributed/workers/ddp_worker_model.h"
#include "distributed/workers/worker_job.h"
#include "dp/distributed/store.h"
#include "dp/dp.h"
#include "dp/optim/optim.h"
#include "support/temp_files.h"

#ifndef DP_DDP_WORKER
#error "DP_DDP_WORKER (the path of the ddp_worker program) is set by tests/CMakeLists.txt"
#endif

namespace dp::distributed {
namespace {

using dp::test::mono_ms;
using std::chrono::milliseconds;
constexpr milliseconds kRun{30000};

// One ddp_worker per rank (args[r] are rank r's arguments).
class Job : public dp::test::WorkerJob {
 public:
  explicit Job(const std::vector<std::vector<std::string>>& args, double timeout_seconds = 20, const std::vector<std::string>& extra_env = {})
      : WorkerJob(DP_DDP_WORKER, args, timeout_seconds, extra_env) {}
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
int64_t field_ms(const std::string& line) {
  std::smatch m;
  return std::regex_search(line, m, std::regex("mono_ms=([0-9]+)")) ? std::stoll(m[1].str()) : -1;
}

// The single process: the whole 12-row batch per step, the same model, loss and optimizer.
OrderedDict<std::string, Tensor> reference_after(int steps) {
  nn::Sequential model = test::make_ddp_worker_model(42);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = test::ddp_worker_batch(step);
    opt.zero_grad();
    cross_entropy(model(x), y).backward();
    opt.step();
  }
  return model->state_dict();
}

void train_and_compare(const std::vector<int64_t>& rows) {
  const int world = static_cast<int>(rows.size());
  std::string shares;
  for (int64_t r : rows) shares += (shares.empty() ? "" : ",") + std::to_string(r);
  SCOPED_TRACE(::testing::Message() << world << " processes, rows " << shares);
  dp::test::TempDir dir;
  const std::string save = (dir.path / "final").string();
  std::vector<std::vector<std::string>> args(world, {"--steps", "6", "--rows-of-rank", shares, "--save", save});
  Job job(args);
  for (int r = 0; r < world; ++r) {
    auto status = job[r].wait_exit(kRun);
    ASSERT_TRUE(status.has_value()) << "rank " << r << " did not finish\n" << job.outputs();
    ASSERT_EQ(*status, 0) << "rank " << r << "\n" << job.outputs();
  }
  const auto expected = reference_after(6);
  std::vector<OrderedDict<std::string, Tensor>> got;
  for (int r = 0; r < world; ++r) got.push_back(dp::load(save + "." + std::to_string(r)));
  ASSERT_EQ(got[0].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const std::string& key = expected[i].key();
    ASSERT_TRUE(got[0].contains(key)) << key;
    const Tensor& a = got[0][key];
    EXPECT_TRUE(allclose(a, expected[i].value(), 1e-5, 1e-6)) << key << " differs from the single-process run";
    for (int r = 1; r < world; ++r) {
      const Tensor& b = got[static_cast<size_t>(r)][key];
      EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << expected[i].key() << ": rank " << r << " differs from rank 0";
    }
  }
}

TEST(DDPProcesses, TwoProcessesMatchTheSingleProcessRun) { train_and_compare({6, 6}); }
TEST(DDPProcesses, ThreeProcessesWithRaggedSharesMatchTheSingleProcessRun) { train_and_compare({5, 4, 3}); }

TEST(DDPProcesses, AKilledRankIsNamedInTheSurvivorWithinOneSecond) {
  Job job({{"--steps", "100000"}, {"--steps", "100000"}});
  ASSERT_TRUE(job[1].wait_for_line("STEP 3", kRun)) << job.outputs();
  const int64_t killed_at = mono_ms();
  job[1].signal(SIGKILL);
  auto error = job[0].wait_for_line("ERROR", milliseconds(10000));
  ASSERT_TRUE(error.has_value()) << "the survivor did not report the lost rank\n" << job.outputs();
  EXPECT_TRUE(contains(*error, "PeerLostError peer=1")) << *error;
  EXPECT_TRUE(contains(*error, "lost rank 1")) << *error;
  EXPECT_LE(field_ms(*error) - killed_at, 1000) << *error;
  EXPECT_EQ(job[0].wait_exit(milliseconds(5000)), 3);
}

// Three ranks: only some survivors talk to the killed rank in the collective at hand; the others
// learn of it from the survivors that saw it (their notice, their closed connections), and every
// survivor names rank 1, within a second.
TEST(DDPProcesses, AKilledRankIsNamedByEverySurvivorOfThree) {
  Job job({{"--steps", "100000"}, {"--steps", "100000"}, {"--steps", "100000"}});
  ASSERT_TRUE(job[1].wait_for_line("STEP 3", kRun)) << job.outputs();
  const int64_t killed_at = mono_ms();
  job[1].signal(SIGKILL);
  for (int r : {0, 2}) {
    auto error = job[r].wait_for_line("ERROR", milliseconds(10000));
    ASSERT_TRUE(error.has_value()) << "rank " << r << " did not report the lost rank\n" << job.outputs();
    EXPECT_TRUE(contains(*error, "PeerLostError peer=1")) << "rank " << r << ": " << *error;
    EXPECT_LE(field_ms(*error) - killed_at, 1000) << *error;
    EXPECT_EQ(job[r].wait_exit(milliseconds(5000)), 3) << job.outputs();
  }
}

TEST(DDPProcesses, ARankThatSkipsABackwardIsNamedInTheTimeout) {
  Job job({{"--steps", "10"}, {"--steps", "10", "--skip-backward-at", "2"}}, /*timeout_seconds=*/2);
  ASSERT_TRUE(job[1].wait_for_line("SKIPPED 2", kRun)) << job.outputs();
  const int64_t skipped_at = mono_ms();
  auto error = job[0].wait_for_line("ERROR", milliseconds(15000));
  ASSERT_TRUE(error.has_value()) << job.outputs();
  EXPECT_TRUE(contains(*error, "CollectiveTimeout behind=1")) << *error;
  // Both ranks' positions: rank 1 did step 2's forward and went no further; rank 0 waits in its backward.
  EXPECT_TRUE(contains(*error, "rank 1 is at step 2 (forward)")) << *error;
  EXPECT_TRUE(contains(*error, "this rank (at step 2 (backward)) waited")) << *error;
  EXPECT_LE(field_ms(*error) - skipped_at, 2000 + 2000) << *error;
  EXPECT_EQ(job[0].wait_exit(milliseconds(5000)), 3);
}

// With DP_DISTRIBUTED_DEBUG=1 the rank that went on to the next forward (a different collective)
// is named at once, not after the timeout.
TEST(DDPProcesses, DebugModeNamesTheRankThatTookAnotherBranch) {
  Job job({{"--steps", "10"}, {"--steps", "10", "--skip-backward-at", "2", "--then", "continue"}}, /*timeout_seconds=*/20,
          {"DP_DISTRIBUTED_DEBUG=1"});
  const int64_t start = mono_ms();
  auto error = job[0].wait_for_line("ERROR", milliseconds(30000));
  ASSERT_TRUE(error.has_value()) << job.outputs();
  EXPECT_TRUE(contains(*error, "CollectiveMismatch rank=1")) << *error;
  EXPECT_LT(field_ms(*error) - start, 15000) << "named before the 20 s timeout: " << *error;
}

}  // namespace
}  // namespace dp::distributed
