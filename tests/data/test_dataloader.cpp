// DataLoader: batching, epochs, shuffling, samplers, worker threads (order, prefetch bound,
// errors, early stop, destruction while busy).
#include <gtest/gtest.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include "dp/data/data.h"
#include "dp/dp.h"

namespace dp::data {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Sample i: data = {i, 2i} (float32 [2]), target = i (int64 scalar). Optionally slow, optionally
// failing at chosen indices while `fail` is on. Counts get() calls and how many run at once.
class IdDataset : public Dataset {
 public:
  explicit IdDataset(size_t n, std::chrono::microseconds delay = 0us) : n_(n), delay_(delay) {}
  Example get(size_t i) override {
    const int now = ++running;
    int seen = max_running.load();
    while (now > seen && !max_running.compare_exchange_weak(seen, now)) {
    }
    ++gets;
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    --running;
    if (fail.load() && std::find(fail_at.begin(), fail_at.end(), static_cast<int64_t>(i)) != fail_at.end()) throw_for(i);
    const double v = static_cast<double>(i);
    return {tensor({v, 2 * v}), scalar_tensor(static_cast<int64_t>(i), kInt64)};
  }
  size_t size() const override { return n_; }

  std::atomic<int> gets{0}, running{0}, max_running{0};
  std::atomic<bool> fail{false};
  std::vector<int64_t> fail_at;  // set before iterating
  int error_kind = 0;            // 0 ValueError, 1 std::runtime_error, 2 std::out_of_range, 3 custom, 4 int

 private:
  struct CustomError : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  [[noreturn]] void throw_for(size_t i) {
    const std::string msg = "sample " + std::to_string(i) + " is broken";
    switch (error_kind) {
      case 0:
        throw ValueError(msg);
      case 1:
        throw std::runtime_error(msg);
      case 2:
        throw std::out_of_range(msg);
      case 3:
        throw CustomError(msg);
      default:
        throw 42;
    }
  }
  size_t n_;
  std::chrono::microseconds delay_;
};

// Every target of every batch of one epoch, in delivery order; also the batch sizes.
struct EpochLog {
  std::vector<int64_t> targets;
  std::vector<int64_t> sizes;
};
EpochLog run_epoch(DataLoader& loader) {
  EpochLog log;
  for (Batch& b : loader) {
    EXPECT_EQ(b.data.dim(), 2);
    EXPECT_EQ(b.data.size(1), 2);
    const std::vector<int64_t> t = b.target.to_vector<int64_t>();
    const std::vector<double> d = b.data.to_vector<double>();
    for (size_t k = 0; k < t.size(); ++k) {  // data row k belongs to target k
      EXPECT_EQ(d[2 * k], static_cast<double>(t[k]));
      EXPECT_EQ(d[2 * k + 1], 2.0 * static_cast<double>(t[k]));
    }
    log.targets.insert(log.targets.end(), t.begin(), t.end());
    log.sizes.push_back(b.data.size(0));
  }
  return log;
}

std::vector<int64_t> iota_vec(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(DataLoader, TutorialBatchesOfThirty) {
  // PyTorch's DataParallel tutorial: RandomDataset(5, 100), batch_size 30, shuffle.
  Generator gen(0);
  auto ds = std::make_shared<RandomDataset>(5, 100, &gen);
  DataLoader loader(ds, DataLoaderOptions().batch_size(30).shuffle(true).seed(42));
  EXPECT_EQ(loader.size(), 4u);
  std::vector<int64_t> sizes;
  std::vector<double> rows_seen;
  for (Batch& b : loader) {
    EXPECT_EQ(b.data.dim(), 2);
    EXPECT_EQ(b.data.size(1), 5);
    EXPECT_EQ(b.data.dtype(), kFloat32);
    EXPECT_FALSE(b.target.defined());
    sizes.push_back(b.data.size(0));
    for (int64_t r = 0; r < b.data.size(0); ++r) rows_seen.push_back(b.data.select(0, r).select(0, 0).item<double>());
  }
  EXPECT_EQ(sizes, std::vector<int64_t>({30, 30, 30, 10}));
  // Every row of the dataset exactly once (first features are distinct normals).
  std::vector<double> all = ds->data().select(1, 0).to_vector<double>();
  std::sort(all.begin(), all.end());
  std::sort(rows_seen.begin(), rows_seen.end());
  EXPECT_EQ(rows_seen, all);
}

TEST(DataLoader, DropLastAndBatchSizes) {
  auto ds = std::make_shared<IdDataset>(100);
  struct Case {
    int64_t bs;
    bool drop_last;
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {
      {30, false, {30, 30, 30, 10}}, {30, true, {30, 30, 30}}, {100, false, {100}},          {100, true, {100}},
      {101, false, {100}},           {101, true, {}},          {25, true, {25, 25, 25, 25}}, {1, false, std::vector<int64_t>(100, 1)},
  };
  for (const Case& c : cases)
    for (int64_t workers : {0, 2}) {
      DataLoader loader(ds, DataLoaderOptions(c.bs).drop_last(c.drop_last).num_workers(workers));
      EpochLog log = run_epoch(loader);
      EXPECT_EQ(log.sizes, c.sizes) << "batch " << c.bs << " drop_last " << c.drop_last << " workers " << workers;
      EXPECT_EQ(loader.size(), c.sizes.size());
      const int64_t kept = std::accumulate(c.sizes.begin(), c.sizes.end(), int64_t{0});
      EXPECT_EQ(log.targets, iota_vec(kept));  // sequential: exactly the first `kept` samples in order
    }
}

TEST(DataLoader, EverySampleOncePerEpochWithAndWithoutShuffleAndWorkers) {
  auto ds = std::make_shared<IdDataset>(257);
  for (bool shuffle : {false, true})
    for (int64_t workers : {0, 1, 3}) {
      DataLoader loader(ds, DataLoaderOptions(16).shuffle(shuffle).seed(5).num_workers(workers));
      for (int epoch = 0; epoch < 3; ++epoch) {
        EpochLog log = run_epoch(loader);
        ASSERT_EQ(log.targets.size(), 257u);
        if (!shuffle) {
          EXPECT_EQ(log.targets, iota_vec(257));
        }
        std::sort(log.targets.begin(), log.targets.end());
        EXPECT_EQ(log.targets, iota_vec(257)) << "shuffle " << shuffle << " workers " << workers << " epoch " << epoch;
      }
      EXPECT_EQ(loader.epochs_started(), 3u);
    }
}

TEST(DataLoader, WorkersDeliverTheSameBatchesInTheSameOrder) {
  auto ds = std::make_shared<IdDataset>(203);
  DataLoader inline_loader(ds, DataLoaderOptions(7).shuffle(true).seed(99));
  std::vector<std::vector<int64_t>> reference;
  for (int epoch = 0; epoch < 3; ++epoch) reference.push_back(run_epoch(inline_loader).targets);
  for (int64_t workers : {1, 3, 8})
    for (int64_t prefetch : {1, 2, 5}) {
      DataLoader loader(ds, DataLoaderOptions(7).shuffle(true).seed(99).num_workers(workers).prefetch(prefetch));
      for (int epoch = 0; epoch < 3; ++epoch)
        EXPECT_EQ(run_epoch(loader).targets, reference[epoch]) << "workers " << workers << " prefetch " << prefetch;
    }
}

TEST(DataLoader, WorkersRunConcurrently) {
  auto ds = std::make_shared<IdDataset>(24, 2000us);
  DataLoader loader(ds, DataLoaderOptions(2).num_workers(3));
  EXPECT_EQ(run_epoch(loader).targets, iota_vec(24));
  EXPECT_GE(ds->max_running.load(), 2);  // 12 batches of 4 ms each: several workers overlap
}

TEST(DataLoader, SeededShuffleIsReproducibleAndNewEachEpoch) {
  auto ds = std::make_shared<IdDataset>(50);
  DataLoader a(ds, DataLoaderOptions(8).shuffle(true).seed(42));
  DataLoader b(ds, DataLoaderOptions(8).shuffle(true).seed(42));
  DataLoader c(ds, DataLoaderOptions(8).shuffle(true).seed(43));
  std::vector<int64_t> a0 = run_epoch(a).targets, a1 = run_epoch(a).targets;
  std::vector<int64_t> b0 = run_epoch(b).targets, b1 = run_epoch(b).targets;
  std::vector<int64_t> c0 = run_epoch(c).targets;
  EXPECT_EQ(a0, b0);
  EXPECT_EQ(a1, b1);
  EXPECT_NE(a0, a1);  // a new permutation each epoch
  EXPECT_NE(a0, c0);  // another seed, another order
  EXPECT_NE(a0, iota_vec(50));
  // Epoch e is the (e+1)-th randperm drawn from Generator(seed), as with PyTorch's seeded sampler.
  Generator g(42);
  EXPECT_EQ(a0, randperm(50, kInt64, &g).to_vector<int64_t>());
  EXPECT_EQ(a1, randperm(50, kInt64, &g).to_vector<int64_t>());
}

TEST(DataLoader, UnseededShuffleFollowsManualSeed) {
  auto ds = std::make_shared<IdDataset>(40);
  manual_seed(1234);
  DataLoader a(ds, DataLoaderOptions(8).shuffle(true));
  manual_seed(1234);
  DataLoader b(ds, DataLoaderOptions(8).shuffle(true));
  DataLoader c(ds, DataLoaderOptions(8).shuffle(true));  // the default generator has moved on
  ASSERT_TRUE(a.options().seed().has_value());
  EXPECT_EQ(a.options().seed(), b.options().seed());
  EXPECT_NE(a.options().seed(), c.options().seed());
  EXPECT_EQ(run_epoch(a).targets, run_epoch(b).targets);
}

TEST(RandomSampler, EpochsAreIndependentlyRecomputable) {
  RandomSampler s(1001, 7);
  std::vector<int64_t> e0 = s.indices(0), e1 = s.indices(1), e5 = s.indices(5);
  EXPECT_EQ(s.indices(5), e5);  // any order of requests gives the same epochs
  EXPECT_EQ(s.indices(0), e0);
  EXPECT_NE(e0, e1);
  std::vector<int64_t> sorted = e5;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota_vec(1001));
  Generator g(7);
  std::vector<std::vector<int64_t>> seq;
  for (int e = 0; e < 6; ++e) seq.push_back(randperm(1001, kInt64, &g).to_vector<int64_t>());
  EXPECT_EQ(seq[0], e0);
  EXPECT_EQ(seq[1], e1);
  EXPECT_EQ(seq[5], e5);
  EXPECT_EQ(RandomSampler(0, 1).indices(3), std::vector<int64_t>{});
  EXPECT_EQ(RandomSampler(1, 1).indices(3), std::vector<int64_t>{0});
  EXPECT_EQ(SequentialSampler(4).indices(9), std::vector<int64_t>({0, 1, 2, 3}));
}

// A user sampler: odd indices in reverse, twice (repeats are allowed).
class OddReverseTwice : public Sampler {
 public:
  explicit OddReverseTwice(size_t n) : n_(n) {}
  std::vector<int64_t> indices(uint64_t epoch) override {
    epochs.push_back(epoch);
    std::vector<int64_t> v;
    for (int rep = 0; rep < 2; ++rep)
      for (int64_t i = static_cast<int64_t>(n_) - 1; i >= 0; --i)
        if (i % 2 == 1) v.push_back(i);
    return v;
  }
  size_t size() const override { return 2 * (n_ / 2); }
  std::vector<uint64_t> epochs;

 private:
  size_t n_;
};

TEST(DataLoader, UserSampler) {
  auto ds = std::make_shared<IdDataset>(10);
  auto sampler = std::make_shared<OddReverseTwice>(10);
  for (int64_t workers : {0, 2}) {
    DataLoader loader(ds, DataLoaderOptions(4).num_workers(workers), sampler);
    EXPECT_EQ(loader.size(), 3u);  // 10 indices in batches of 4
    EpochLog log = run_epoch(loader);
    EXPECT_EQ(log.targets, std::vector<int64_t>({9, 7, 5, 3, 1, 9, 7, 5, 3, 1}));
    EXPECT_EQ(log.sizes, std::vector<int64_t>({4, 4, 2}));
    run_epoch(loader);
  }
  EXPECT_EQ(sampler->epochs, std::vector<uint64_t>({0, 1, 0, 1}));  // each loader counts its epochs
  EXPECT_THROW(DataLoader(ds, DataLoaderOptions(4).shuffle(true), sampler), ValueError);
}

class BadSampler : public Sampler {
 public:
  std::vector<int64_t> indices(uint64_t) override { return v; }
  size_t size() const override { return claimed; }
  std::vector<int64_t> v;
  size_t claimed = 0;
};

TEST(DataLoader, InvalidSamplerOutputIsReportedAtBegin) {
  auto ds = std::make_shared<IdDataset>(5);
  auto s = std::make_shared<BadSampler>();
  DataLoader loader(ds, DataLoaderOptions(2), s);
  s->v = {0, 5};
  s->claimed = 2;
  try {
    loader.begin();
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("index 5"), std::string::npos) << e.what();
  }
  s->v = {0, 1, 2};
  EXPECT_THROW(loader.begin(), ValueError);  // 3 indices, size() says 2
  s->v = {4, 4};
  EXPECT_EQ(run_epoch(loader).targets, std::vector<int64_t>({4, 4}));
}

TEST(DataLoader, BadOptions) {
  auto ds = std::make_shared<IdDataset>(5);
  EXPECT_THROW(DataLoader(ds, DataLoaderOptions(0)), ValueError);
  EXPECT_THROW(DataLoader(ds, DataLoaderOptions(2).num_workers(-1)), ValueError);
  EXPECT_THROW(DataLoader(ds, DataLoaderOptions(2).prefetch(0)), ValueError);
  EXPECT_THROW(DataLoader(std::shared_ptr<Dataset>(), DataLoaderOptions(2)), ValueError);
}

TEST(DataLoader, EmptyDatasetHasNoBatches) {
  for (int64_t workers : {0, 2}) {
    DataLoader loader(TensorDataset(zeros({0, 3})), DataLoaderOptions(4).num_workers(workers));
    EXPECT_EQ(loader.size(), 0u);
    int n = 0;
    for (Batch& b : loader) {
      (void)b;
      ++n;
    }
    EXPECT_EQ(n, 0);
  }
}

// A TensorDataset that counts which path the loader takes.
class CountingTensorDataset : public TensorDataset {
 public:
  using TensorDataset::TensorDataset;
  Example get(size_t i) override {
    ++gets;
    return TensorDataset::get(i);
  }
  Example get_batch(const std::vector<int64_t>& idx) override {
    ++batches;
    return TensorDataset::get_batch(idx);
  }
  std::atomic<int> gets{0}, batches{0};
};

TEST(DataLoader, TensorDatasetBatchesAreOneGather) {
  auto ds = std::make_shared<CountingTensorDataset>(arange(60, kFloat32).view({20, 3}), arange(20));
  DataLoader loader(ds, DataLoaderOptions(6).num_workers(2));
  std::vector<int64_t> targets;
  for (Batch& b : loader) {
    EXPECT_TRUE(b.data.is_contiguous());
    for (int64_t t : b.target.to_vector<int64_t>()) targets.push_back(t);
    EXPECT_EQ(b.data.select(1, 0).to_vector<int64_t>(), (b.target * 3).to_vector<int64_t>());
  }
  EXPECT_EQ(targets, iota_vec(20));
  EXPECT_EQ(ds->batches.load(), 4);
  EXPECT_EQ(ds->gets.load(), 0);
}

TEST(DataLoader, DatasetByValue) {
  DataLoader loader(TensorDataset(ones({7, 2}), arange(7)), DataLoaderOptions(3));
  EXPECT_EQ(loader.size(), 3u);
  EXPECT_EQ(loader.dataset()->size(), 7u);
}

// ---- errors ----

TEST(DataLoader, WorkerExceptionSurfacesAtItsBatchWithTypeAndIndex) {
  for (int64_t workers : {0, 1, 3}) {
    auto ds = std::make_shared<IdDataset>(100);
    ds->fail_at = {47, 81};  // batches 4 and 8 of 10
    ds->fail = true;
    DataLoader loader(ds, DataLoaderOptions(10).num_workers(workers));
    std::vector<int64_t> seen;
    try {
      for (Batch& b : loader) seen.push_back(b.target.to_vector<int64_t>().front());
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {  // the original type
      const std::string m = e.what();
      EXPECT_NE(m.find("batch 4 of epoch 0"), std::string::npos) << m;
      EXPECT_NE(m.find("sample 47 is broken"), std::string::npos) << m;
    }
    EXPECT_EQ(seen, std::vector<int64_t>({0, 10, 20, 30})) << "workers " << workers;  // batches before it arrived
    // The loop can be started again: a clean epoch once the data is fixed.
    ds->fail = false;
    EXPECT_EQ(run_epoch(loader).targets, iota_vec(100)) << "workers " << workers;
    ds->fail = true;
    try {
      run_epoch(loader);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("batch 4 of epoch 2"), std::string::npos) << e.what();
    }
  }
}

TEST(DataLoader, IterationCanContinuePastAFailedBatch) {
  for (int64_t workers : {0, 2}) {
    auto ds = std::make_shared<IdDataset>(30);
    ds->fail_at = {12};
    ds->fail = true;
    DataLoader loader(ds, DataLoaderOptions(5).num_workers(workers));
    std::vector<int64_t> firsts;
    int failures = 0;
    for (auto it = loader.begin(); it != loader.end(); ++it) {
      try {
        firsts.push_back(it->target.to_vector<int64_t>().front());
      } catch (const ValueError&) {
        ++failures;
        EXPECT_THROW(*it, ValueError);  // the same error again on every access
      }
    }
    EXPECT_EQ(failures, 1);
    EXPECT_EQ(firsts, std::vector<int64_t>({0, 5, 15, 20, 25}));
  }
}

TEST(DataLoader, ExceptionTypes) {
  for (int64_t workers : {0, 2}) {
    auto make = [&](int kind) {
      auto ds = std::make_shared<IdDataset>(8);
      ds->fail_at = {5};
      ds->fail = true;
      ds->error_kind = kind;
      return ds;
    };
    auto first_error = [&](std::shared_ptr<IdDataset> ds) {
      DataLoader loader(ds, DataLoaderOptions(2).num_workers(workers));
      for (Batch& b : loader) (void)b;
    };
    try {
      first_error(make(1));
      FAIL();
    } catch (const std::exception& e) {
      EXPECT_TRUE(typeid(e) == typeid(std::runtime_error)) << typeid(e).name();
      EXPECT_NE(std::string(e.what()).find("batch 2 of epoch 0: sample 5 is broken"), std::string::npos) << e.what();
    }
    EXPECT_THROW(first_error(make(2)), std::out_of_range);
    // A type we cannot rebuild with a new message: a dp::Error that nests the original.
    try {
      first_error(make(3));
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("batch 2 of epoch 0: sample 5 is broken"), std::string::npos) << e.what();
      try {
        std::rethrow_if_nested(e);
        FAIL() << "no nested exception";
      } catch (const std::runtime_error& inner) {
        EXPECT_STREQ(inner.what(), "sample 5 is broken");
        EXPECT_FALSE(typeid(inner) == typeid(std::runtime_error));  // the custom subclass itself
      }
    }
    try {
      first_error(make(4));
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("batch 2"), std::string::npos) << e.what();
      try {
        std::rethrow_if_nested(e);
        FAIL() << "no nested exception";
      } catch (int v) {
        EXPECT_EQ(v, 42);
      }
    }
  }
}

// ---- prefetch, early stop, destruction ----

// Counts get_batch calls; each takes `delay`.
class BatchCounter : public Dataset {
 public:
  BatchCounter(size_t n, std::chrono::milliseconds delay) : n_(n), delay_(delay) {}
  Example get(size_t i) override { return {scalar_tensor(static_cast<double>(i)), {}}; }
  size_t size() const override { return n_; }
  Example get_batch(const std::vector<int64_t>& idx) override {
    ++started;
    std::this_thread::sleep_for(delay_);
    Example e = Dataset::get_batch(idx);
    ++finished;
    return e;
  }
  std::atomic<int> started{0}, finished{0};

 private:
  size_t n_;
  std::chrono::milliseconds delay_;
};

// Waits until `pred` holds or `limit` passes; returns whether it held.
template <typename P>
bool wait_for(P pred, std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(DataLoader, PrefetchIsBoundedByPrefetchTimesWorkers) {
  auto ds = std::make_shared<BatchCounter>(100, 0ms);
  DataLoader loader(ds, DataLoaderOptions(5).num_workers(2).prefetch(3));  // 20 batches, 6 in flight
  auto it = loader.begin();
  ASSERT_TRUE(wait_for([&] { return ds->finished.load() == 6; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ds->started.load(), 6);  // nothing beyond the bound
  EXPECT_EQ(it->data.size(0), 5);    // take batch 0: one more may start
  ASSERT_TRUE(wait_for([&] { return ds->finished.load() == 7; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ds->started.load(), 7);
}

TEST(DataLoader, EarlyBreakJoinsWorkers) {
  auto ds = std::make_shared<BatchCounter>(400, 20ms);
  DataLoader loader(ds, DataLoaderOptions(4).num_workers(3).prefetch(2));
  int n = 0;
  const auto t0 = Clock::now();
  for (Batch& b : loader) {
    (void)b;
    if (++n == 2) break;  // 100 batches; stop after 2
  }
  const auto stop_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  // The workers are joined when the loop ends: nothing runs afterwards.
  const int started = ds->started.load();
  EXPECT_EQ(ds->finished.load(), started);
  std::this_thread::sleep_for(60ms);
  EXPECT_EQ(ds->started.load(), started);
  EXPECT_LE(started, 2 + 3 * 2 + 3);  // delivered + in flight + one claim per worker at most
  EXPECT_LT(stop_ms, 2000);           // far below the 100 * 20 ms / 3 of a full epoch
  // And the loader still works afterwards.
  n = 0;
  for (Batch& b : loader) {
    (void)b;
    ++n;
  }
  EXPECT_EQ(n, 100);
}

TEST(DataLoader, DestroyingMidEpochWhileWorkersAreBusy) {
  // Loader destroyed first, iterator still in use: the epoch owns what it needs.
  {
    auto ds = std::make_shared<BatchCounter>(60, 15ms);
    auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions(3).num_workers(3).prefetch(1));
    auto it = loader->begin();
    EXPECT_EQ(it->data.size(0), 3);
    loader.reset();
    ++it;
    EXPECT_EQ(it->data.to_vector<double>(), std::vector<double>({3, 4, 5}));
    ASSERT_TRUE(wait_for([&] { return ds->started.load() >= 4; }));
    const auto t0 = Clock::now();
    { auto gone = std::move(it); }  // joins while workers are inside get_batch
    EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(), 1000);
    EXPECT_EQ(ds->started.load(), ds->finished.load());
    EXPECT_EQ(ds.use_count(), 1);  // no thread or epoch kept a reference
  }
  // Iterator and loader destroyed together right after starting (workers mid-batch).
  for (int round = 0; round < 5; ++round) {
    auto ds = std::make_shared<BatchCounter>(1000, 5ms);
    {
      DataLoader loader(ds, DataLoaderOptions(2).num_workers(4).prefetch(4));
      auto it = loader.begin();
      std::this_thread::sleep_for(std::chrono::milliseconds(round * 3));
    }
    EXPECT_EQ(ds->started.load(), ds->finished.load());
    EXPECT_LE(ds->started.load(), 4 * 4 + 4);
    EXPECT_EQ(ds.use_count(), 1);
  }
}

TEST(DataLoader, SkippedBatchesAreNotBuiltInline) {
  auto ds = std::make_shared<BatchCounter>(20, 0ms);
  DataLoader loader(ds, DataLoaderOptions(5));
  auto it = loader.begin();
  ++it;
  ++it;
  EXPECT_EQ(it->data.to_vector<double>(), std::vector<double>({10, 11, 12, 13, 14}));
  EXPECT_EQ(ds->started.load(), 1);
  ++it;
  ++it;
  EXPECT_TRUE(it == loader.end());
  EXPECT_THROW(*it, IndexError);
  ++it;  // past the end: stays there
  EXPECT_TRUE(it == loader.end());
}

TEST(DataLoader, MovedIteratorKeepsItsPlace) {
  auto ds = std::make_shared<IdDataset>(9);
  DataLoader loader(ds, DataLoaderOptions(3).num_workers(2));
  auto it = loader.begin();
  ++it;
  DataLoader::Iterator moved = std::move(it);
  EXPECT_TRUE(it == loader.end());  // NOLINT(bugprone-use-after-move): documented state
  EXPECT_EQ(moved->target.to_vector<int64_t>(), std::vector<int64_t>({3, 4, 5}));
  EXPECT_EQ(moved.batch_index(), 1u);
  EXPECT_EQ(moved.epoch(), 0u);
}

}  // namespace
}  // namespace dp::data
