// The Chrome-trace timeline (DP_TIMELINE): DDP records forward, backward, each bucket's ready point
// and all-reduce span, and the wait at the end of backward, as complete events a trace viewer reads.
// DP_TIMELINE is read once per process, so this file sets it before anything records.
#include <gtest/gtest.h>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include "distributed/ddp_test_support.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/distributed/timeline.h"
#include "dp/dp.h"
#include "support/temp_files.h"
#include "support/test_models.h"

namespace dp::distributed {
namespace {

struct Event {
  std::string name, phase;
  int64_t ts = 0, dur = 0;
  int tid = 0;
};

// The events of a timeline file: "[" then one JSON object per line, each followed by ",".
std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "[");
  std::vector<Event> out;
  const std::regex re(R"re(^\{"name": "([^"]*)", "cat": "[a-z]+", "ph": "([Xi])", "ts": (\d+), "pid": \d+, "tid": (\d+)(, "dur": (\d+))?.*\},$)re");
  while (std::getline(in, line)) {
    std::smatch m;
    EXPECT_TRUE(std::regex_match(line, m, re)) << line;
    if (m.empty()) continue;
    Event e{m[1], m[2], std::stoll(m[3]), m[6].matched ? std::stoll(m[6]) : 0, std::stoi(m[4])};
    out.push_back(e);
  }
  return out;
}

TEST(Timeline, DdpRecordsForwardBackwardAndEveryBucket) {
  dp::test::TempDir dir;
  const std::string path = (dir.path / "trace.json").string();
  ::setenv("DP_TIMELINE", path.c_str(), 1);
  ASSERT_TRUE(timeline::enabled());
  std::vector<std::shared_ptr<dp::test::Mlp>> models;
  for (int r = 0; r < 2; ++r) models.push_back(std::make_shared<dp::test::Mlp>());
  Tensor x = randn({4, 8}), t = randint(0, 4, {4});
  DistributedDataParallelOptions tiny;
  tiny.first_bucket_mb = tiny.bucket_cap_mb = 1e-6;  // one bucket per parameter: 6 buckets
  test::run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<dp::test::Mlp> ddp(models[r], group, tiny);
    for (int step = 0; step < 2; ++step) ddp->forward_loss(nn::CrossEntropyLoss(), t.narrow(0, r * 2, 2), x.narrow(0, r * 2, 2)).backward();
  });
  timeline::flush();
  const std::vector<Event> events = read_events(path);
  auto count = [&](const std::string& name) {
    int n = 0;
    for (const Event& e : events) n += e.name == name;
    return n;
  };
  // 2 ranks x 2 steps.
  EXPECT_EQ(count("forward and loss"), 4);
  EXPECT_EQ(count("backward"), 4);
  EXPECT_EQ(count("wait for buckets"), 4);
  for (int b = 0; b < 6; ++b) {
    EXPECT_EQ(count("bucket " + std::to_string(b) + " ready"), 4) << b;
    EXPECT_EQ(count("allreduce bucket " + std::to_string(b)), 4) << b;
  }
  // Spans are well formed: every all-reduce on the communication row, every backward at least as
  // long as its wait.
  for (const Event& e : events) {
    if (e.name.rfind("allreduce bucket", 0) == 0) {
      EXPECT_EQ(e.phase, "X");
      EXPECT_EQ(e.tid, 1);
    }
    if (e.name.find("ready") != std::string::npos) EXPECT_EQ(e.phase, "i");
  }
  int64_t backward_total = 0, wait_total = 0;
  for (const Event& e : events) {
    if (e.name == "backward") backward_total += e.dur;
    if (e.name == "wait for buckets") wait_total += e.dur;
  }
  EXPECT_GE(backward_total, wait_total);
}

}  // namespace
}  // namespace dp::distributed
