// The Chrome-trace timeline (DP_TIMELINE): DDP records forward, backward, each bucket's ready point
// (its last gradient arrived) and all-reduce span (launch to done), and the wait at the end of
// backward, as events a trace viewer reads. DP_TIMELINE is read once per process, so every test of
// this program writes to the one file set before anything records, and reads back the events of
// its own time only.
#include <gtest/gtest.h>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>
#include "distributed/ddp_test_support.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/distributed/timeline.h"
#include "dp/dp.h"
#include "support/temp_files.h"
#include "support/test_models.h"

namespace dp::distributed {
namespace {

// The process's timeline file, in a directory removed at exit (after the timeline closed it).
const std::string& trace_path() {
  static dp::test::TempDir dir;
  static const std::string path = [] {
    const std::string p = dir.file("trace.json");
    ::setenv("DP_TIMELINE", p.c_str(), 1);
    return p;
  }();
  return path;
}

struct Event {
  std::string name, phase;
  int64_t ts = 0, dur = 0;
  int tid = 0;
  nlohmann::json args;
};

// The events of the timeline file from `since_us` on: "[" then one JSON object per line, each
// followed by ",".
std::vector<Event> read_events(int64_t since_us) {
  timeline::flush();
  std::ifstream in(trace_path());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "[");
  std::vector<Event> out;
  while (std::getline(in, line)) {
    EXPECT_TRUE(line.size() > 2 && line.back() == ',') << line;
    const nlohmann::json j = nlohmann::json::parse(line.substr(0, line.size() - 1), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << line;
    if (j.is_discarded()) continue;
    Event e{j.at("name").get<std::string>(), j.at("ph").get<std::string>(), j.at("ts").get<int64_t>(),
            j.value("dur", int64_t{0}),      j.at("tid").get<int>(),        j.value("args", nlohmann::json::object())};
    if (e.ts >= since_us) out.push_back(std::move(e));
  }
  return out;
}

int count(const std::vector<Event>& events, const std::string& name) {
  int n = 0;
  for (const Event& e : events) n += e.name == name;
  return n;
}

// One bucket of one rank's backward pass: when its last gradient arrived, and its all-reduce.
struct BucketTimes {
  int64_t ready = -1, launch = -1, done = -1;
};
using BucketKey = std::tuple<int, int64_t, int64_t>;  // rank, step, bucket

// Pairs each "bucket N ready" with its "allreduce bucket N" through their args, and checks the
// events' form: ready points on the training row, all-reduces on the communication row.
std::map<BucketKey, BucketTimes> bucket_times(const std::vector<Event>& events) {
  std::map<BucketKey, BucketTimes> out;
  for (const Event& e : events) {
    const bool ready = e.name.rfind("bucket ", 0) == 0, reduce = e.name.rfind("allreduce bucket ", 0) == 0;
    if (!ready && !reduce) continue;
    const int64_t b = e.args.at("bucket").get<int64_t>();
    EXPECT_EQ(e.name, ready ? "bucket " + std::to_string(b) + " ready" : "allreduce bucket " + std::to_string(b));
    EXPECT_EQ(e.phase, ready ? "i" : "X") << e.name;
    EXPECT_EQ(e.tid, ready ? 0 : 1) << e.name;
    EXPECT_GT(e.args.at("bytes").get<int64_t>(), 0) << e.name;
    BucketTimes& t = out[{e.args.at("rank").get<int>(), e.args.at("step").get<int64_t>(), b}];
    if (ready) {
      EXPECT_EQ(t.ready, -1) << "twice: " << e.name;
      t.ready = e.ts;
    } else {
      EXPECT_EQ(t.launch, -1) << "twice: " << e.name;
      t.launch = e.ts;
      t.done = e.ts + e.dur;
    }
  }
  return out;
}

// Every bucket of every (rank, step) was ready, then launched, then done.
void expect_ready_launch_done(const std::map<BucketKey, BucketTimes>& buckets) {
  for (const auto& [key, t] : buckets) {
    const auto& [rank, step, b] = key;
    SCOPED_TRACE("rank " + std::to_string(rank) + " step " + std::to_string(step) + " bucket " + std::to_string(b));
    ASSERT_GE(t.ready, 0) << "no ready event";
    ASSERT_GE(t.launch, 0) << "no all-reduce span";
    EXPECT_LE(t.ready, t.launch);
    EXPECT_LE(t.launch, t.done);
  }
}

TEST(Timeline, DdpRecordsForwardBackwardAndEveryBucket) {
  trace_path();
  ASSERT_TRUE(timeline::enabled());
  const int64_t start = timeline::now_us();
  std::vector<std::shared_ptr<dp::test::Mlp>> models;
  for (int r = 0; r < 2; ++r) models.push_back(std::make_shared<dp::test::Mlp>());
  Tensor x = randn({4, 8}), t = randint(0, 4, {4});
  DistributedDataParallelOptions tiny;
  tiny.first_bucket_mb = tiny.bucket_cap_mb = 1e-6;  // one bucket per parameter: 6 buckets
  test::run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<dp::test::Mlp> ddp(models[r], group, tiny);
    ASSERT_EQ(ddp->bucket_indices().size(), 6u);
    for (int step = 0; step < 2; ++step) ddp->forward_loss(nn::CrossEntropyLoss(), t.narrow(0, r * 2, 2), x.narrow(0, r * 2, 2)).backward();
  });
  const std::vector<Event> events = read_events(start);
  // 2 ranks x 2 steps.
  EXPECT_EQ(count(events, "forward and loss"), 4);
  EXPECT_EQ(count(events, "backward"), 4);
  EXPECT_EQ(count(events, "wait for buckets"), 4);
  for (int b = 0; b < 6; ++b) {
    EXPECT_EQ(count(events, "bucket " + std::to_string(b) + " ready"), 4) << b;
    EXPECT_EQ(count(events, "allreduce bucket " + std::to_string(b)), 4) << b;
  }
  // Each of the 24 (rank, step, bucket) has its ready point and its all-reduce, in that order.
  const auto buckets = bucket_times(events);
  EXPECT_EQ(buckets.size(), 24u);
  for (int r = 0; r < 2; ++r)
    for (int64_t step = 0; step < 2; ++step)
      for (int64_t b = 0; b < 6; ++b) EXPECT_TRUE(buckets.count({r, step, b})) << r << " " << step << " " << b;
  expect_ready_launch_done(buckets);
  // Every backward at least as long as its wait.
  int64_t backward_total = 0, wait_total = 0;
  for (const Event& e : events) {
    if (e.name == "backward") backward_total += e.dur;
    if (e.name == "wait for buckets") wait_total += e.dur;
  }
  EXPECT_GE(backward_total, wait_total);
}

// Two parameters on separate branches of the graph, registered in either order: buckets follow
// the reverse registration order, so the one registered last is bucket 0.
struct TwoBranches : nn::Module {
  Tensor a, b;
  explicit TwoBranches(bool a_first) {
    if (a_first) {
      a = register_parameter("a", ones({3}));
      b = register_parameter("b", ones({3}));
    } else {
      b = register_parameter("b", ones({3}));
      a = register_parameter("a", ones({3}));
    }
  }
  Tensor forward(const Tensor& x) { return (x * a).sum() + (x * b * 2).sum(); }
};

// A bucket whose gradients arrive while an earlier bucket still waits for its own is ready before
// it is launched: the trace shows ready, then launch (with the earlier bucket), then done. Which of
// a and b gets its gradient first is the backward engine's choice; the graph is the same in both
// registration orders, so in one of them the first gradient is bucket 1's, which then waits for
// bucket 0. A hook that sleeps after each gradient puts kGap between the two.
TEST(Timeline, ABucketReadyBeforeAnEarlierOneIsLaunchedAfterIt) {
  trace_path();
  ASSERT_TRUE(timeline::enabled());
  constexpr auto kGap = std::chrono::milliseconds(5);
  DistributedDataParallelOptions tiny;
  tiny.first_bucket_mb = tiny.bucket_cap_mb = 1e-6;  // one bucket per parameter
  int waited = 0;                                    // (rank, step, bucket)s launched at least kGap after they were ready
  for (bool a_first : {true, false}) {
    SCOPED_TRACE(a_first ? "a registered first" : "b registered first");
    const int64_t start = timeline::now_us();
    test::run_ranks(2, [&](const ProcessGroupPtr& group, int) {
      auto model = std::make_shared<TwoBranches>(a_first);
      for (Tensor& p : model->parameters()) p.register_post_accumulate_grad_hook([gap = kGap](Tensor&) { std::this_thread::sleep_for(gap); });
      nn::DistributedDataParallel<TwoBranches> ddp(model, group, tiny);
      ASSERT_EQ(ddp->bucket_indices().size(), 2u);
      for (int step = 0; step < 3; ++step) ddp(ones({3})).backward();
    });
    const auto buckets = bucket_times(read_events(start));
    EXPECT_EQ(buckets.size(), 2u * 3u * 2u);  // ranks x steps x buckets
    expect_ready_launch_done(buckets);
    for (const auto& [key, t] : buckets)
      if (t.launch - t.ready >= std::chrono::microseconds(kGap).count() - 1) ++waited;  // (1 us: times are whole microseconds)
  }
  // In one of the two orders bucket 1 was ready kGap before bucket 0, on every rank and step.
  EXPECT_GE(waited, 6) << "no bucket was ready before an earlier bucket";
}

}  // namespace
}  // namespace dp::distributed
