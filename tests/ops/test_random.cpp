// Random numbers: Philox known-answer test, the documented stream layout (so the same seed gives
// the same numbers on every machine), per-device default generators, determinism, distributions
// within statistical bounds, in-place ops and their errors.
#include <gtest/gtest.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <thread>
#include "support/golden.h"

namespace dp {
namespace {

struct Moments {
  double mean = 0, var = 0, min = INFINITY, max = -INFINITY;
};

Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size() - 1);
  return m;
}

TEST(Philox, KnownAnswer) {
  // Random123's philox4x32-10 test vector: counter 0, key 0.
  uint32_t out[4];
  philox4x32(0, 0, out);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
  // Different counters and keys give different blocks.
  uint32_t a[4], b[4];
  philox4x32(1, 0, a);
  philox4x32(0, 1, b);
  EXPECT_NE(a[0], out[0]);
  EXPECT_NE(b[0], out[0]);
  EXPECT_NE(a[0], b[0]);
}

TEST(Generator, StateAndReserve) {
  Generator g(99);
  EXPECT_EQ(g.seed(), 99u);
  EXPECT_EQ(g.offset(), 0u);
  EXPECT_EQ(g.reserve(3), 0u);
  EXPECT_EQ(g.reserve(2), 3u);
  EXPECT_EQ(g.offset(), 5u);
  g.set_state(7, 40);
  EXPECT_EQ(g.seed(), 7u);
  EXPECT_EQ(g.offset(), 40u);
  g.manual_seed(8);
  EXPECT_EQ(g.seed(), 8u);
  EXPECT_EQ(g.offset(), 0u);
  // rand of n float32 values consumes ceil(n / 4) blocks; float64 and normals ceil(n / 2).
  Generator h(1);
  rand({10}, kFloat32, &h);
  EXPECT_EQ(h.offset(), 3u);
  rand({5}, kFloat64, &h);
  EXPECT_EQ(h.offset(), 6u);
  randn({3}, kFloat32, &h);
  EXPECT_EQ(h.offset(), 8u);
}

TEST(Generator, ReserveIsThreadSafe) {
  Generator g(5);
  constexpr int kThreads = 8, kPer = 2000;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kPer; ++i) got[t].push_back(g.reserve(3));
    });
  for (auto& t : ts) t.join();
  std::set<uint64_t> all;
  for (auto& v : got) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPer));  // no block handed out twice
  EXPECT_EQ(g.offset(), static_cast<uint64_t>(3 * kThreads * kPer));
  EXPECT_EQ(*all.rbegin(), static_cast<uint64_t>(3 * (kThreads * kPer - 1)));
}

TEST(Random, DocumentedStreamLayout) {
  // float32 uniforms: element i = (word i%4 of block i/4) >> 8, times 2^-24.
  Generator g(2024);
  std::vector<float> r = rand({6}, kFloat32, &g).to_vector<float>();
  for (int i = 0; i < 6; ++i) {
    uint32_t w[4];
    philox4x32(2024, static_cast<uint64_t>(i / 4), w);
    EXPECT_EQ(r[i], static_cast<float>(static_cast<double>(w[i % 4] >> 8) / 16777216.0)) << i;
  }
  // float64 uniforms: 53 bits of words (2k, 2k+1) of block i/2.
  Generator g2(11);
  std::vector<double> d = rand({3}, kFloat64, &g2).to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    uint32_t w[4];
    philox4x32(11, static_cast<uint64_t>(i / 2), w);
    const uint64_t x = (static_cast<uint64_t>(w[2 * (i % 2)]) << 32) | w[2 * (i % 2) + 1];
    EXPECT_EQ(d[i], static_cast<double>(x >> 11) / 9007199254740992.0) << i;
  }
  // The stream continues from the offset: two draws of 4 equal one draw of 8.
  Generator a(3), b(3);
  std::vector<float> one = rand({8}, kFloat32, &a).to_vector<float>();
  std::vector<float> first = rand({4}, kFloat32, &b).to_vector<float>();
  std::vector<float> second = rand({4}, kFloat32, &b).to_vector<float>();
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(one, first);
}

TEST(Random, LargeFillsDoNotDependOnThreads) {
  // Big fills are split over threads on the host and run serially on a device worker; the
  // numbers are the same either way.
  if (cpu_device_count() < 1) set_cpu_device_count(1);
  const int64_t n = 600001;
  for (DType dt : {kFloat32, kFloat64}) {
    Generator a(12), b(12);
    Tensor host_u = rand({n}, dt, &a), host_n = randn({n}, dt, &a);
    Tensor host_i = randint(-9, 9, {n}, kInt64, &a);
    Tensor dev_u, dev_n, dev_i;
    worker_for(Device("cpu:0"))
        ->submit([&] {
          dev_u = rand({n}, dt, &b);
          dev_n = randn({n}, dt, &b);
          dev_i = randint(-9, 9, {n}, kInt64, &b);
        })
        .get();
    EXPECT_EQ(host_u.to_vector<double>(), dev_u.to_vector<double>());
    EXPECT_EQ(host_n.to_vector<double>(), dev_n.to_vector<double>());
    EXPECT_EQ(host_i.to_vector<int64_t>(), dev_i.to_vector<int64_t>());
    EXPECT_EQ(a.offset(), b.offset());
  }
}

TEST(Random, SameSeedSameNumbers) {
  manual_seed(42);
  Tensor a = rand({100});
  Tensor b = randn({50}, kFloat64);
  Tensor c = randint(0, 10, {20});
  Tensor p = randperm(30);
  manual_seed(42);
  EXPECT_EQ(rand({100}).to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(randn({50}, kFloat64).to_vector<double>(), b.to_vector<double>());
  EXPECT_EQ(randint(0, 10, {20}).to_vector<int64_t>(), c.to_vector<int64_t>());
  EXPECT_EQ(randperm(30).to_vector<int64_t>(), p.to_vector<int64_t>());
  manual_seed(43);
  EXPECT_NE(rand({100}).to_vector<float>(), a.to_vector<float>());
  // The host generator after manual_seed(s) is Generator(s).
  manual_seed(77);
  Generator g(77);
  EXPECT_EQ(rand({16}).to_vector<float>(), rand({16}, kFloat32, &g).to_vector<float>());
  // A saved state replays.
  Generator& host = default_generator(Device::cpu());
  const uint64_t seed = host.seed(), off = host.offset();
  Tensor x = randn({10});
  host.set_state(seed, off);
  EXPECT_EQ(randn({10}).to_vector<float>(), x.to_vector<float>());
}

TEST(Random, EachDeviceHasItsOwnStream) {
  if (cpu_device_count() < 2) set_cpu_device_count(2);
  manual_seed(5);
  std::vector<float> host = rand({64}).to_vector<float>();
  std::vector<float> d0 = rand({64}, Device("cpu:0")).to_vector<float>();
  std::vector<float> d1 = rand({64}, Device("cpu:1")).to_vector<float>();
  EXPECT_NE(host, d0);
  EXPECT_NE(host, d1);
  EXPECT_NE(d0, d1);
  EXPECT_NE(&default_generator(Device("cpu:0")), &default_generator(Device("cpu:1")));
  EXPECT_NE(&default_generator(Device::cpu()), &default_generator(Device("cpu:0")));
  EXPECT_EQ(&default_generator(Device("cpu:1")), &default_generator(Device("cpu:1")));
  // Drawing on one device does not move another device's stream.
  manual_seed(5);
  rand({1000});
  rand({1000}, Device("cpu:0"));
  EXPECT_EQ(rand({64}, Device("cpu:1")).to_vector<float>(), d1);
  // manual_seed reseeds every device (existing and future ones) deterministically.
  manual_seed(5);
  EXPECT_EQ(rand({64}, Device("cpu:0")).to_vector<float>(), d0);
  EXPECT_EQ(default_generator(Device("cpu:1")).offset(), 0u);
  EXPECT_EQ(default_generator(Device("cpu:1")).seed(), default_generator(Device("cpu:1")).seed());
  const uint64_t s1 = default_generator(Device("cpu:1")).seed();
  manual_seed(6);
  EXPECT_NE(default_generator(Device("cpu:1")).seed(), s1);
  manual_seed(5);
  EXPECT_EQ(default_generator(Device("cpu:1")).seed(), s1);
  EXPECT_EQ(default_generator(Device::cpu()).seed(), 5u);
}

TEST(Random, LayoutIndependentInPlace) {
  // Element i of the logical (row-major) order gets draw i, whatever the memory layout.
  Generator g1(31), g2(31);
  Tensor x = empty({4, 3}).t();  // [3, 4], not contiguous
  uniform_(x, 0.0, 1.0, &g1);
  Tensor y = rand({3, 4}, kFloat32, &g2);
  EXPECT_EQ(x.to_vector<float>(), y.to_vector<float>());
  Tensor base = zeros({4, 6});
  Tensor v = base.slice(1, 0, std::nullopt, 2);
  Generator g3(8);
  normal_(v, 0.0, 1.0, &g3);
  std::vector<float> b = base.to_vector<float>();
  for (int r = 0; r < 4; ++r)
    for (int c = 1; c < 6; c += 2) EXPECT_EQ(b[r * 6 + c], 0.0f) << "untouched column";
}

TEST(Random, UniformStatistics) {
  manual_seed(1);
  const int64_t n = 200000;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = rand({n}, dt);
    EXPECT_EQ(t.dtype(), dt);
    Moments m = moments(t);
    EXPECT_GE(m.min, 0.0);
    EXPECT_LT(m.max, 1.0);
    const double se = std::sqrt(1.0 / 12.0 / n);
    const double q = dt == kBFloat16 ? 1.0 / 256 : dt == kFloat16 ? 1.0 / 2048 : 0.0;  // grid offset of coarse types
    EXPECT_NEAR(m.mean, 0.5 - q / 2, 6 * se);
    EXPECT_NEAR(m.var, 1.0 / 12.0, 0.005);
  }
  // uniform_ on a range.
  Tensor u = empty({n}, kFloat64);
  uniform_(u, -2.0, 3.0);
  Moments mu = moments(u);
  EXPECT_GE(mu.min, -2.0);
  EXPECT_LT(mu.max, 3.0);
  EXPECT_NEAR(mu.mean, 0.5, 6 * 5 * std::sqrt(1.0 / 12.0 / n));
  EXPECT_NEAR(mu.var, 25.0 / 12.0, 0.05);
  // Buckets: each tenth of [0, 1) gets about n / 10.
  std::vector<double> v = rand({n}, kFloat64).to_vector<double>();
  std::vector<int64_t> buckets(10, 0);
  for (double x : v) ++buckets[static_cast<int>(x * 10)];
  double chi2 = 0;
  for (int64_t k : buckets) chi2 += (k - n / 10.0) * (k - n / 10.0) / (n / 10.0);
  EXPECT_LT(chi2, 33.7);  // 9 degrees of freedom, p = 1e-4
}

TEST(Random, NormalStatistics) {
  manual_seed(2);
  const int64_t n = 200000;
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = randn({n}, dt);
    Moments m = moments(t);
    EXPECT_NEAR(m.mean, 0.0, 6 / std::sqrt(static_cast<double>(n)));
    EXPECT_NEAR(m.var, 1.0, 6 * std::sqrt(2.0 / n));
    std::vector<double> v = t.to_vector<double>();
    int64_t within1 = 0, within2 = 0;
    double m4 = 0;
    for (double x : v) {
      within1 += std::fabs(x) < 1.0;
      within2 += std::fabs(x) < 2.0;
      m4 += x * x * x * x;
    }
    EXPECT_NEAR(within1 / static_cast<double>(n), 0.682689, 0.005);
    EXPECT_NEAR(within2 / static_cast<double>(n), 0.954500, 0.003);
    EXPECT_NEAR(m4 / n, 3.0, 0.1);  // kurtosis of a normal
  }
  Tensor h = randn({1000}, kFloat16);
  EXPECT_EQ(h.dtype(), kFloat16);
  Tensor x = empty({n}, kFloat64);
  normal_(x, 3.0, 2.0);
  Moments m = moments(x);
  EXPECT_NEAR(m.mean, 3.0, 6 * 2.0 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(std::sqrt(m.var), 2.0, 0.02);
  Tensor c = empty({10}, kFloat32);
  normal_(c, 1.5, 0.0);
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(10, 1.5f));
}

TEST(Random, RandintStatistics) {
  manual_seed(3);
  const int64_t n = 100000;
  Tensor t = randint(-5, 5, {n});
  EXPECT_EQ(t.dtype(), kInt64);
  std::vector<int64_t> v = t.to_vector<int64_t>();
  std::vector<int64_t> counts(10, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -5);
    ASSERT_LT(x, 5);
    ++counts[x + 5];
  }
  double chi2 = 0;
  for (int64_t k : counts) chi2 += (k - n / 10.0) * (k - n / 10.0) / (n / 10.0);
  EXPECT_LT(chi2, 33.7);
  EXPECT_EQ(randint(0, 3, {4, 5}, kInt32).dtype(), kInt32);
  EXPECT_EQ(randint(0, 3, {4}, kFloat32).dtype(), kFloat32);
  std::vector<int64_t> ones_only = randint(7, 8, {50}).to_vector<int64_t>();
  EXPECT_EQ(ones_only, std::vector<int64_t>(50, 7));
  // Huge ranges work too.
  Tensor big = randint(INT64_MIN / 2, INT64_MAX / 2, {1000});
  Moments m = moments(big);
  EXPECT_LT(m.min, -1e17);
  EXPECT_GT(m.max, 1e17);
}

TEST(Random, RandpermIsAUniformPermutation) {
  manual_seed(4);
  std::vector<int64_t> p = randperm(1000).to_vector<int64_t>();
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(p, sorted);
  EXPECT_EQ(randperm(0).numel(), 0);
  EXPECT_EQ(randperm(1).to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_EQ(randperm(5, kInt32).dtype(), kInt32);
  // All 6 permutations of 3 are about equally likely.
  std::map<std::vector<int64_t>, int> seen;
  const int trials = 6000;
  for (int i = 0; i < trials; ++i) ++seen[randperm(3).to_vector<int64_t>()];
  EXPECT_EQ(seen.size(), 6u);
  double chi2 = 0;
  for (auto& [perm, k] : seen) chi2 += (k - 1000.0) * (k - 1000.0) / 1000.0;
  EXPECT_LT(chi2, 25.7);  // 5 degrees of freedom, p = 1e-4
}

TEST(Random, BernoulliAndLike) {
  manual_seed(6);
  const int64_t n = 100000;
  Tensor f = empty({n});
  bernoulli_(f, 0.3);
  Moments m = moments(f);
  EXPECT_NEAR(m.mean, 0.3, 6 * std::sqrt(0.21 / n));
  std::set<double> values;
  for (double x : f.to_vector<double>()) values.insert(x);
  EXPECT_EQ(values, (std::set<double>{0.0, 1.0}));
  Tensor b = empty({1000}, kBool);
  bernoulli_(b, 1.0);
  EXPECT_EQ(b.to_vector<int64_t>(), std::vector<int64_t>(1000, 1));
  Tensor i = empty({1000}, kInt64);
  bernoulli_(i, 0.0);
  EXPECT_EQ(i.to_vector<int64_t>(), std::vector<int64_t>(1000, 0));
  Tensor base = zeros({2, 3}, kFloat64);
  Tensor rl = rand_like(base), nl = randn_like(base);
  EXPECT_EQ(rl.sizes(), base.sizes());
  EXPECT_EQ(rl.dtype(), kFloat64);
  EXPECT_EQ(nl.dtype(), kFloat64);
  Generator g(9), g2(9);
  EXPECT_EQ(rand_like(base, &g).to_vector<double>(), rand({2, 3}, kFloat64, &g2).to_vector<double>());
}

TEST(Random, InPlaceBumpsVersionAndChecksArguments) {
  Tensor t = zeros({4});
  uint32_t v = t.version();
  uniform_(t);
  EXPECT_GT(t.version(), v);
  v = t.version();
  normal_(t);
  EXPECT_GT(t.version(), v);
  v = t.version();
  bernoulli_(t, 0.5);
  EXPECT_GT(t.version(), v);
  EXPECT_THROW(uniform_(t, 2.0, 1.0), ValueError);
  EXPECT_THROW(normal_(t, 0.0, -1.0), ValueError);
  EXPECT_THROW(bernoulli_(t, 1.5), ValueError);
  EXPECT_THROW(bernoulli_(t, -0.1), ValueError);
  Tensor it = zeros({4}, kInt64);
  EXPECT_THROW(uniform_(it), DTypeError);
  EXPECT_THROW(normal_(it), DTypeError);
  EXPECT_THROW(rand({2}, kInt64), DTypeError);
  EXPECT_THROW(randn({2}, kInt32), DTypeError);
  EXPECT_THROW(randint(3, 3, {2}), ValueError);
  EXPECT_THROW(randint(4, 3, {2}), ValueError);
  EXPECT_THROW(randint(0, 257, {2}, kUInt8), ValueError);
  EXPECT_THROW(randint(-1, 3, {2}, kUInt8), ValueError);
  EXPECT_THROW(randint(0, 3, {2}, kBool), ValueError);
  EXPECT_EQ(randint(0, 256, {2}, kUInt8).dtype(), kUInt8);
  EXPECT_EQ(randint(0, 2, {2}, kBool).dtype(), kBool);
  // A leaf that requires grad cannot be filled in place (with grad mode on); under no_grad it can
  // (how parameters are initialised).
  Tensor w = zeros({3}, TensorOptions().requires_grad());
  EXPECT_THROW(uniform_(w), AutogradError);
  {
    NoGradGuard no_grad;
    uniform_(w, -1.0, 1.0);
    normal_(w);
  }
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  // Empty tensors are fine.
  Tensor e = empty({0});
  EXPECT_NO_THROW(uniform_(e));
  EXPECT_EQ(rand({0, 3}).numel(), 0);
}

}  // namespace
}  // namespace dp
