// The gloo process group's collectives, ranks as threads (process_group_ranks.h): every collective,
// dtype and reduce op against a result computed here independently (rank r holds f(r, i); the
// expected value folds f over the ranks in double, then rounds as the dtype does). Allreduce runs
// through shared memory between ranks of one host (shm_allreduce.h) and through gloo's TCP with
// DP_SHM=0: both are checked, and the channel itself below (chunking, a peer leaving, a timeout).
#include <gtest/gtest.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <gloo/common/error.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include "distributed/process_group_ranks.h"
#include "distributed/shm_allreduce.h"
#include "dp/distributed/errors.h"
#include "dp/dp.h"

namespace dp::distributed {
namespace {

using testing::options_with_timeout;
using testing::run_ranks;
using Fn = std::function<double(int rank, int64_t i)>;

const std::vector<DType> kAllDtypes{kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
const std::vector<DType> kFloatDtypes{kFloat16, kBFloat16, kFloat32, kFloat64};

// A 1-d tensor of `dtype` with element i = f(rank, i) (values chosen to be exact in every dtype used).
Tensor values(DType dtype, int64_t n, int rank, const Fn& f) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = f(rank, i);
  return tensor(v, {n}, kFloat64).to(dtype);
}

// A value as stored in `dtype` (what converting a double into the dtype gives).
double as_dtype(double x, DType dtype) {
  switch (dtype) {
    case kBool:
      return x != 0 ? 1 : 0;
    case kFloat16:
      return static_cast<float>(Half(static_cast<float>(x)));
    case kBFloat16:
      return static_cast<float>(BFloat16(static_cast<float>(x)));
    case kFloat32:
      return static_cast<float>(x);
    default:
      return x;
  }
}

// The reduction of f(r, i) over ranks as the group must compute it: exact in double for the values
// used (the float32 accumulation of 16-bit inputs is then exact too), rounded once to the dtype;
// Avg multiplies the sum by 1/size in the accumulation type, as the group does.
double expected(DType dtype, ReduceOp op, int size, int64_t i, const Fn& f) {
  double acc = as_dtype(f(0, i), dtype);
  for (int r = 1; r < size; ++r) {
    const double x = as_dtype(f(r, i), dtype);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc = dtype == kBool ? double(acc != 0 || x != 0) : acc + x;
        break;
      case ReduceOp::Product:
        acc = dtype == kBool ? double(acc != 0 && x != 0) : acc * x;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, x);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, x);
        break;
    }
  }
  if (op == ReduceOp::Avg) {
    if (dtype == kFloat64) return acc * (1.0 / size);
    acc = static_cast<float>(acc) * static_cast<float>(1.0 / size);
  }
  return as_dtype(acc, dtype);
}

void expect_reduced(const Tensor& t, DType dtype, ReduceOp op, int size, const Fn& f, const std::string& what) {
  ASSERT_EQ(t.dtype(), dtype) << what;
  const std::vector<double> got = t.contiguous().to_vector<double>();
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], expected(dtype, op, size, i, f)) << what << " element " << i << " of " << size << " ranks";
}

// Values that fit every dtype's range and precision for every op and up to 4 ranks.
Fn values_for(DType dtype, ReduceOp op) {
  if (dtype == kBool) return [](int r, int64_t i) { return double((r + i) % 3 == 0); };
  if (op == ReduceOp::Product) return [](int r, int64_t i) { return double(1 + (r + i) % 3); };  // products <= 81
  if (dtype == kUInt8) return [](int r, int64_t i) { return double((r * 7 + i) % 50); };         // sums < 256
  if (is_integral(dtype, false)) return [](int r, int64_t i) { return double((r + 1) * (i % 11) - 3 * r); };
  return [](int r, int64_t i) { return 0.5 * (r + 1) + 0.25 * double(i % 29) - 3.0; };
}

// Sets DP_SHM for the test's lifetime (the group reads it when it forms).
class ShmSetting {
 public:
  explicit ShmSetting(bool on) { ::setenv("DP_SHM", on ? "1" : "0", 1); }
  ~ShmSetting() { ::unsetenv("DP_SHM"); }
  ShmSetting(const ShmSetting&) = delete;
  ShmSetting& operator=(const ShmSetting&) = delete;
};

// (ranks, shared memory on)
class AllreduceRanks : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int size() const { return std::get<0>(GetParam()); }
  ShmSetting shm_{std::get<1>(GetParam())};
};

TEST_P(AllreduceRanks, EveryDtypeAndReduceOpMatchesTheLocallyComputedResult) {
  const int size = this->size();
  const std::vector<ReduceOp> ops{ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max};
  run_ranks(size, [&](int rank, ProcessGroup& pg) {
    for (DType dtype : kAllDtypes) {
      for (ReduceOp op : ops) {
        const Fn f = values_for(dtype, op);
        Tensor t = values(dtype, 37, rank, f);
        pg.allreduce(t, op)->wait();
        expect_reduced(t, dtype, op, size, f, dp::detail::str(dtype_name(dtype), " ", reduce_op_name(op)));
      }
    }
  });
}

TEST_P(AllreduceRanks, AvgOfEveryFloatingDtypeIsTheSumTimesOneOverSize) {
  const int size = this->size();
  run_ranks(size, [&](int rank, ProcessGroup& pg) {
    for (DType dtype : kFloatDtypes) {
      const Fn f = values_for(dtype, ReduceOp::Avg);
      Tensor t = values(dtype, 41, rank, f);
      pg.allreduce(t, ReduceOp::Avg)->wait();
      expect_reduced(t, dtype, ReduceOp::Avg, size, f, dp::detail::str(dtype_name(dtype), " avg"));
    }
  });
}

TEST_P(AllreduceRanks, SeveralTensorsOfMixedDtypesAndANonContiguousOneInOneCall) {
  const int size = this->size();
  const Fn f = values_for(kFloat32, ReduceOp::Sum);
  const Fn g = values_for(kInt64, ReduceOp::Sum);
  run_ranks(size, [&](int rank, ProcessGroup& pg) {
    Tensor a = values(kFloat32, 10, rank, f);
    Tensor b = values(kInt64, 7, rank, g);
    Tensor c = values(kFloat16, 5, rank, f);
    Tensor d = values(kFloat32, 3, rank, g);
    // A transposed [4, 6] view: element (i, j) of the view is element j * 4 + i of the base.
    Tensor base = values(kFloat32, 24, rank, f).view({6, 4});
    Tensor e = base.t();
    ASSERT_FALSE(e.is_contiguous());
    pg.allreduce(std::vector<Tensor>{a, b, c, d, e}, ReduceOp::Sum)->wait();
    expect_reduced(a, kFloat32, ReduceOp::Sum, size, f, "a");
    expect_reduced(b, kInt64, ReduceOp::Sum, size, g, "b");
    expect_reduced(c, kFloat16, ReduceOp::Sum, size, f, "c");
    expect_reduced(d, kFloat32, ReduceOp::Sum, size, g, "d");
    expect_reduced(base.reshape({24}), kFloat32, ReduceOp::Sum, size, f, "the base of the transposed view");
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllreduceRanks, ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()),
                         [](const auto& info) { return dp::detail::str(std::get<0>(info.param), std::get<1>(info.param) ? "_shm" : "_tcp"); });

// ---- the shared-memory channel itself ----

// Runs body(rank, channel) on `size` threads whose channels met through one HashStore.
void run_channels(int size, const std::function<void(int, detail::ShmChannel&)>& body) {
  auto store = std::make_shared<HashStore>(std::chrono::seconds(10));
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        std::string why;
        auto channel = detail::ShmChannel::connect(*store, r, size, std::chrono::seconds(10), &why);
        if (!channel) throw std::runtime_error("no channel: " + why);
        body(r, *channel);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << size;
}

TEST(ShmChannel, IsUsedBetweenRanksOfOneHostUnlessDpShmIsZero) {
  ShmSetting on(true);
  ASSERT_FALSE(detail::shm_host_identity().empty());
  run_channels(3, [](int, detail::ShmChannel& c) { EXPECT_GT(c.slot_bytes(), 0u); });
  ::setenv("DP_SHM", "0", 1);
  auto store = std::make_shared<HashStore>(std::chrono::seconds(10));
  std::vector<std::string> why(2);
  bool made[2] = {true, true};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back(
        [&, r] { made[r] = detail::ShmChannel::connect(*store, r, 2, std::chrono::seconds(10), &why[static_cast<size_t>(r)]) != nullptr; });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(made[r]) << r;
    EXPECT_EQ(why[static_cast<size_t>(r)], "DP_SHM=0") << r;
  }
}

TEST(ShmChannel, ATooSmallDevShmMeansTcpForEveryRankNotAFailureLater) {
  // In a child process with a mount namespace of its own, /dev/shm becomes a 64 KiB tmpfs (as in a
  // small container); both ranks must agree to go without the channel, naming the reason.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64k") != 0)
      ::_exit(77);
    ::setenv("DP_SHM", "1", 1);
    auto store = std::make_shared<HashStore>(std::chrono::seconds(10));
    std::string why[2];
    bool made[2] = {true, true};
    std::thread t0([&] { made[0] = detail::ShmChannel::connect(*store, 0, 2, std::chrono::seconds(10), &why[0]) != nullptr; });
    std::thread t1([&] { made[1] = detail::ShmChannel::connect(*store, 1, 2, std::chrono::seconds(10), &why[1]) != nullptr; });
    t0.join();
    t1.join();
    const bool ok = !made[0] && !made[1] && why[0] == why[1] && why[0].find("/dev/shm has") != std::string::npos;
    if (!ok) std::fprintf(stderr, "made %d %d, why '%s' / '%s'\n", made[0], made[1], why[0].c_str(), why[1].c_str());
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot make a mount namespace with a small /dev/shm here (needs root)";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ShmChannel, ABufferOfSeveralSlotsIsReducedBitIdenticallyOnEveryRank) {
  // Values k / 8 with small k: every sum is exact in float, so the expectation is exact too; the odd
  // count leaves a short last chunk and parts that do not divide evenly.
  ShmSetting on(true);
  const int size = 3;
  std::vector<std::vector<float>> results(size);
  size_t count = 0;
  run_channels(size, [&](int rank, detail::ShmChannel& c) {
    const size_t n = c.slot_bytes() / sizeof(float) * 2 + 1001;
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13) % 101) - 50) / 8.0f;
    c.allreduce(v.data(), n, kFloat32, ReduceOp::Sum, std::chrono::seconds(10));
    std::vector<float> m(n);
    for (size_t i = 0; i < n; ++i) m[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13) % 101) - 50);
    c.allreduce(m.data(), n, kFloat32, ReduceOp::Max, std::chrono::seconds(10));
    for (size_t i = 0; i < n; ++i) {
      float sum = 0, max = -1e9f;
      for (int r = 0; r < size; ++r) {
        const float x = static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(r) * 13) % 101) - 50);
        sum += x / 8.0f;
        max = std::max(max, x);
      }
      ASSERT_EQ(v[i], sum) << "element " << i << " of " << n << " on rank " << rank;
      ASSERT_EQ(m[i], max) << "element " << i << " on rank " << rank;
    }
    results[static_cast<size_t>(rank)] = std::move(v);
    if (rank == 0) count = n;
  });
  ASSERT_GT(count, 0u);
  for (int r = 1; r < size; ++r) EXPECT_TRUE(results[static_cast<size_t>(r)] == results[0]) << "rank " << r;
}

TEST(ShmChannel, APeerThatLeavesWakesTheWaitingRankAtOnceNamingIt) {
  ShmSetting on(true);
  run_channels(2, [](int rank, detail::ShmChannel& c) {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      c.abort();
      return;
    }
    std::vector<float> v(1000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      c.allreduce(v.data(), v.size(), kFloat32, ReduceOp::Sum, std::chrono::seconds(20));
      ADD_FAILURE() << "the allreduce completed without its peer";
    } catch (const detail::ShmPeerLost& e) {
      EXPECT_EQ(e.rank(), 1);
      EXPECT_NE(std::string(e.what()).find("left the channel"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  });
}

TEST(ShmChannel, ARankThatNeverComesIsNamedWhenTheTimeoutPasses) {
  ShmSetting on(true);
  std::atomic<int> timed_out{0};
  run_channels(3, [&](int rank, detail::ShmChannel& c) {
    if (rank == 2) {  // late, not gone: its channel stays open until the others have timed out
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (timed_out.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    std::vector<float> v(100, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      c.allreduce(v.data(), v.size(), kFloat32, ReduceOp::Sum, std::chrono::milliseconds(300));
      ADD_FAILURE() << "the allreduce completed without rank 2";
    } catch (const gloo::IoException& e) {
      EXPECT_NE(std::string(e.what()).find("Timed out waiting 300ms"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank(s) 2"), std::string::npos) << e.what();
    }
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
    // Closing this channel now would fail the other waiter with "left the channel" instead.
    ++timed_out;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (timed_out.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
}

TEST(ProcessGroupCollectives, HalfPrecisionSumIsTheFloatSumRoundedOnce) {
  // float16 near 2048 and bfloat16 near 256 step by 2: 2048 + 1 + 1 + 1 = 2051 in float rounds (ties
  // to even) to 2052; adding in 16-bit one rank at a time would give 2048 (each +1 rounds away).
  run_ranks(4, [&](int rank, ProcessGroup& pg) {
    Tensor h = tensor(std::vector<double>{rank == 0 ? 2048.0 : 1.0, 0.5}, {2}, kFloat64).to(kFloat16);
    Tensor b = tensor(std::vector<double>{rank == 0 ? 256.0 : 1.0, 0.5}, {2}, kFloat64).to(kBFloat16);
    pg.allreduce(std::vector<Tensor>{h, b})->wait();
    EXPECT_EQ(h.to_vector<double>(), (std::vector<double>{2052.0, 2.0}));
    EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{260.0, 2.0}));
    EXPECT_EQ(static_cast<float>(Half(2051.0f)), 2052.0f);  // the rounding the expectation relies on
  });
}

// allreduce_compressed keeps 16-bit values 16-bit on the wire: with 2 ranks one float addition and
// one rounding (the same as allreduce); with 4 ranks one rounding per ring step, so the 2048 + 1 + 1
// + 1 of the test above gives 2048 or 2052 depending on where the ring starts (the same on every
// rank). Avg divides in float.
TEST(ProcessGroupCollectives, CompressedAllreduceSendsHalfPrecisionAsIs) {
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    Tensor h = tensor(std::vector<double>{rank == 0 ? 2048.0 : 1.0, 0.25, rank == 0 ? 3.0 : 5.0}, {3}, kFloat64).to(kFloat16);
    Tensor b = tensor(std::vector<double>{rank == 0 ? 256.0 : 3.0, 0.5, 1.0}, {3}, kFloat64).to(kBFloat16);
    Tensor f = tensor(std::vector<double>{1.5, 2.5, static_cast<double>(rank)}, {3}, kFloat64).to(kFloat32);
    pg.allreduce_compressed(std::vector<Tensor>{h, b, f})->wait();
    EXPECT_EQ(h.to_vector<double>(), (std::vector<double>{2048.0, 0.5, 8.0}));  // 2049 rounds to even
    EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{260.0, 1.0, 2.0}));   // 259 rounds to 260
    EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{3.0, 5.0, 1.0}));
    Tensor avg = tensor(std::vector<double>{rank == 0 ? 3.0 : 4.0}, {1}, kFloat64).to(kFloat16);
    pg.allreduce_compressed({avg}, ReduceOp::Avg)->wait();
    EXPECT_EQ(avg.to_vector<double>(), std::vector<double>{3.5});
  });
  std::vector<double> got(4);
  run_ranks(4, [&](int rank, ProcessGroup& pg) {
    Tensor h = tensor(std::vector<double>{rank == 0 ? 2048.0 : 1.0}, {1}, kFloat64).to(kFloat16);
    pg.allreduce_compressed({h})->wait();
    got[static_cast<size_t>(rank)] = h.to_vector<double>()[0];
  });
  EXPECT_TRUE(got[0] == 2048.0 || got[0] == 2052.0) << got[0];
  for (double g : got) EXPECT_EQ(g, got[0]);
}

TEST(ProcessGroupCollectives, ALargeContiguousFloatTensorIsReducedInItsOwnMemory) {
  // The DDP bucket path: the tensor's memory is handed to gloo as it is, so the result is in the
  // same storage (and more than one of gloo's 1 MiB segments is involved).
  const int64_t n = 600'000;
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    Tensor t = full({n}, double(rank + 1), kFloat32);
    void* before = t.data_ptr();
    pg.allreduce(t)->wait();
    EXPECT_EQ(t.data_ptr(), before);
    const float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < n; i += 9973) ASSERT_EQ(p[i], 3.0f) << i;
    EXPECT_EQ(p[n - 1], 3.0f);
  });
}

TEST(ProcessGroupCollectives, BroadcastFromEachRootOfMixedAndNonContiguousTensors) {
  for (int size : {2, 3, 4}) {
    run_ranks(size, [&](int rank, ProcessGroup& pg) {
      for (int root = 0; root < size; ++root) {
        const Fn f = [root](int r, int64_t i) { return r == root ? double(root * 10 + i) : -1.0; };
        Tensor a = values(kFloat32, 9, rank, f);
        Tensor b = values(kInt32, 4, rank, f);
        Tensor c = values(kBFloat16, 6, rank, f).view({2, 3}).t();  // non-contiguous
        pg.broadcast(std::vector<Tensor>{a, b, c}, root)->wait();
        const Fn from_root = [&](int, int64_t i) { return f(root, i); };
        expect_reduced(a, kFloat32, ReduceOp::Max, 1, from_root, dp::detail::str("a from root ", root));
        expect_reduced(b, kInt32, ReduceOp::Max, 1, from_root, dp::detail::str("b from root ", root));
        // c is the transpose of [0 1 2; 3 4 5] (+ root * 10): its row-major elements are 0 3 1 4 2 5.
        const std::vector<double> cv = c.contiguous().to_vector<double>();
        const std::vector<int> order{0, 3, 1, 4, 2, 5};
        for (size_t k = 0; k < order.size(); ++k) EXPECT_EQ(cv[k], root * 10 + order[k]) << "c from root " << root;
        // A single contiguous tensor (the direct path).
        Tensor d = full({5}, rank == root ? 7.0 + root : 0.0, kFloat64);
        pg.broadcast(d, root)->wait();
        EXPECT_EQ(d.to_vector<double>(), std::vector<double>(5, 7.0 + root));
      }
    });
  }
}

TEST(ProcessGroupCollectives, AllgatherCollectsEveryRanksInputInRankOrder) {
  for (int size : {2, 3, 4}) {
    run_ranks(size, [&](int rank, ProcessGroup& pg) {
      const Fn f = [](int r, int64_t i) { return double(r * 10 + i); };
      for (DType dtype : {kFloat32, kInt64, kFloat16, kUInt8}) {
        Tensor input = values(dtype, 6, rank, f).view({2, 3});
        std::vector<Tensor> outputs;
        for (int r = 0; r < size; ++r) outputs.push_back(zeros({2, 3}, dtype));
        auto work = pg.allgather(outputs, input);
        work->wait();
        ASSERT_EQ(work->result().size(), static_cast<size_t>(size));
        for (int r = 0; r < size; ++r) {
          const Fn from_r = [&](int, int64_t i) { return f(r, i); };
          expect_reduced(outputs[static_cast<size_t>(r)].reshape({6}), dtype, ReduceOp::Max, 1, from_r,
                         dp::detail::str(dtype_name(dtype), " from ", r));
        }
      }
      // A non-contiguous input and non-contiguous outputs.
      Tensor input = values(kFloat32, 6, rank, f).view({3, 2}).t();
      std::vector<Tensor> outputs;
      for (int r = 0; r < size; ++r) outputs.push_back(zeros({3, 2}, kFloat32).t());
      pg.allgather(outputs, input)->wait();
      for (int r = 0; r < size; ++r) {
        const std::vector<double> got = outputs[static_cast<size_t>(r)].contiguous().to_vector<double>();
        const std::vector<int> order{0, 2, 4, 1, 3, 5};
        for (size_t k = 0; k < order.size(); ++k) EXPECT_EQ(got[k], r * 10 + order[k]) << "from rank " << r;
      }
    });
  }
}

TEST(ProcessGroupCollectives, ReduceScatterGivesEachRankTheReductionOfItsSlice) {
  for (int size : {2, 3, 4}) {
    run_ranks(size, [&](int rank, ProcessGroup& pg) {
      for (DType dtype : {kFloat32, kFloat64, kInt32, kFloat16}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg}) {
          if (op == ReduceOp::Avg && !is_floating_point(dtype)) continue;
          // inputs[j] on rank r holds g(r, j * 13 + i): slice j of a 13 * size long vector.
          const Fn g = values_for(dtype, op);
          std::vector<Tensor> inputs;
          for (int j = 0; j < size; ++j) {
            const Fn slice = [&, j](int r, int64_t i) { return g(r, j * 13 + i); };
            inputs.push_back(values(dtype, 13, rank, slice));
          }
          Tensor output = zeros({13}, dtype);
          pg.reduce_scatter(output, inputs, op)->wait();
          const Fn mine = [&](int r, int64_t i) { return g(r, rank * 13 + i); };
          expect_reduced(output, dtype, op, size, mine, dp::detail::str("reduce_scatter ", dtype_name(dtype), " ", reduce_op_name(op)));
        }
      }
    });
  }
}

TEST(ProcessGroupCollectives, BarrierWaitsForTheLastRank) {
  run_ranks(3, [&](int rank, ProcessGroup& pg) {
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    const auto start = std::chrono::steady_clock::now();
    pg.barrier()->wait();
    const auto waited = std::chrono::steady_clock::now() - start;
    if (rank != 2) {
      EXPECT_GE(waited, std::chrono::milliseconds(300)) << "rank " << rank << " left the barrier before rank 2 entered it";
    }
  });
}

TEST(ProcessGroupCollectives, ManyAsyncOperationsRunInIssueOrder) {
  // 60 operations issued without waiting. Round k: an allreduce of its own tensor, then a
  // broadcast of `chain_k` (rank r holds (r + 1)^2) from root k % size followed by an allreduce of
  // it: in order that gives size * (root + 1)^2; the other way round 1 + 4 + 9 = 14 for any root.
  const int size = 3;
  run_ranks(size, [&](int rank, ProcessGroup& pg) {
    const uint64_t first = pg.sequence();
    std::vector<Tensor> sums, chains;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 20; ++k) {
      sums.push_back(full({16}, double(k + rank), kFloat32));
      chains.push_back(full({4}, double((rank + 1) * (rank + 1)), kFloat64));
      works.push_back(pg.allreduce(sums.back()));
      works.push_back(pg.broadcast(chains.back(), k % size));
      works.push_back(pg.allreduce(chains.back(), ReduceOp::Sum));
    }
    EXPECT_EQ(pg.sequence(), first + works.size());
    for (size_t w = 0; w < works.size(); ++w) {
      works[w]->wait();
      EXPECT_EQ(works[w]->sequence(), first + w);
    }
    for (int k = 0; k < 20; ++k) {
      const int root = k % size;
      EXPECT_EQ(sums[static_cast<size_t>(k)].to_vector<float>(), std::vector<float>(16, float(size * k + 0 + 1 + 2))) << "round " << k;
      EXPECT_EQ(chains[static_cast<size_t>(k)].to_vector<double>(), std::vector<double>(4, double(size * (root + 1) * (root + 1)))) << "round " << k;
    }
  });
}

TEST(ProcessGroupCollectives, TwoGroupsOnOneStoreWithDifferentNamesWorkSideBySide) {
  auto store = std::make_shared<HashStore>(std::chrono::seconds(10));
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto a = make_gloo_process_group(store, r, 2, options_with_timeout(std::chrono::seconds(10), "alpha"));
        auto b = make_gloo_process_group(store, r, 2, options_with_timeout(std::chrono::seconds(10), "beta"));
        // Interleaved: the groups' sequences are independent.
        Tensor x = full({3}, double(r + 1), kFloat32);
        Tensor y = full({3}, double(10 * (r + 1)), kFloat32);
        auto wb = b->allreduce(y);
        auto wa = a->allreduce(x);
        wa->wait();
        wb->wait();
        EXPECT_EQ(x.to_vector<float>(), std::vector<float>(3, 3.0f));
        EXPECT_EQ(y.to_vector<float>(), std::vector<float>(3, 30.0f));
        EXPECT_EQ(a->sequence(), 1u);
        EXPECT_EQ(b->sequence(), 1u);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(ProcessGroupCollectives, ASecondGroupOfTheSameNameOnTheSameStoreStartsFresh) {
  // A restart: the same ranks form "default" again on the same store. The second group must not
  // read the first one's keys (its generation differs), and must work.
  auto store = std::make_shared<HashStore>(std::chrono::seconds(10));
  for (int round = 0; round < 2; ++round) {
    run_ranks(
        2,
        [&](int rank, ProcessGroup& pg) {
          Tensor t = full({2}, double(rank + round), kFloat64);
          pg.allreduce(t)->wait();
          EXPECT_EQ(t.to_vector<double>(), std::vector<double>(2, 1.0 + 2 * round));
          EXPECT_EQ(pg.sequence(), 1u);
        },
        options_with_timeout(std::chrono::seconds(10)), store);
  }
  EXPECT_EQ(store->get_string("default/joined"), "4");
}

TEST(ProcessGroupCollectives, WorkResultHoldsTheOutputsAndThenRunsAfterCompletion) {
  run_ranks(2, [&](int rank, ProcessGroup& pg) {
    Tensor t = full({2}, double(rank), kFloat32);
    std::atomic<bool> ran{false};
    auto work = pg.allreduce(t);
    work->then([&] { ran = true; });
    EXPECT_TRUE(work->wait(std::chrono::seconds(10)));
    EXPECT_TRUE(ran.load());
    EXPECT_TRUE(work->is_success());
    EXPECT_EQ(work->operation(), "allreduce");
    ASSERT_EQ(work->result().size(), 1u);
    EXPECT_TRUE(work->result()[0].is_same(t));
  });
}

TEST(ProcessGroupCollectives, OneRankGroupNeedsNoPeers) {
  auto store = std::make_shared<HashStore>();
  auto pg = make_gloo_process_group(store, 0, 1, options_with_timeout(std::chrono::seconds(5)));
  Tensor t = full({3}, 2.5, kFloat32);
  pg->allreduce(t, ReduceOp::Avg)->wait();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, 2.5f));
  std::vector<Tensor> out{zeros({3}, kFloat32)};
  pg->allgather(out, t)->wait();
  EXPECT_EQ(out[0].to_vector<float>(), std::vector<float>(3, 2.5f));
  Tensor rs = zeros({3}, kFloat32);
  pg->reduce_scatter(rs, {t}, ReduceOp::Sum)->wait();
  EXPECT_EQ(rs.to_vector<float>(), std::vector<float>(3, 2.5f));
  pg->barrier()->wait();
  pg->monitored_barrier(std::chrono::milliseconds(500));
  EXPECT_EQ(pg->sequence(), 4u);
  EXPECT_EQ(pg->backend_name(), "gloo");
}

}  // namespace
}  // namespace dp::distributed
