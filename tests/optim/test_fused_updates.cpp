// The fused kernels on their own: the vector body and the scalar tail give the same bits (each
// element through the n = 1 path vs the whole array), for every flag combination and both dtypes;
// NaN propagation through amsgrad's maximum; empty arrays.
#include <gtest/gtest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>
#include "backend/cpu/fused_updates.h"

namespace dp::backend::cpu::fused {
namespace {

template <typename T>
std::vector<T> random_vector(size_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(u(gen));
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T>
void check_adam_paths(const AdamScalars& s) {
  const size_t n = 1003;  // vector blocks and a tail
  auto p = random_vector<T>(n, 1, -2, 2), g = random_vector<T>(n, 2, -1, 1);
  auto m = random_vector<T>(n, 3, -0.1, 0.1), v = random_vector<T>(n, 4, 0, 0.01), vmax = random_vector<T>(n, 5, 0, 0.01);
  auto p1 = p, m1 = m, v1 = v, vmax1 = vmax;
  adam_update(p.data(), g.data(), m.data(), v.data(), vmax.data(), static_cast<int64_t>(n), s);
  for (size_t i = 0; i < n; ++i) adam_update(&p1[i], &g[i], &m1[i], &v1[i], &vmax1[i], 1, s);
  EXPECT_TRUE(same_bits(p, p1));
  EXPECT_TRUE(same_bits(m, m1));
  EXPECT_TRUE(same_bits(v, v1));
  if (s.amsgrad) {
    EXPECT_TRUE(same_bits(vmax, vmax1));
  }
}

template <typename T>
void check_sgd_paths(const SgdScalars& s, bool initialized) {
  const size_t n = 1003;
  auto p = random_vector<T>(n, 1, -2, 2), g = random_vector<T>(n, 2, -1, 1), buf = random_vector<T>(n, 3, -1, 1);
  auto p1 = p, buf1 = buf;
  sgd_update(p.data(), g.data(), buf.data(), initialized, static_cast<int64_t>(n), s);
  for (size_t i = 0; i < n; ++i) sgd_update(&p1[i], &g[i], &buf1[i], initialized, 1, s);
  EXPECT_TRUE(same_bits(p, p1));
  if (s.momentum != 0) {
    EXPECT_TRUE(same_bits(buf, buf1));
  }
}

TEST(FusedUpdates, AdamVectorAndScalarPathsAgree) {
  for (int flags = 0; flags < 16; ++flags) {
    AdamScalars s;
    s.lr = 0.01;
    s.beta1 = 0.8;
    s.beta2 = 0.99;
    s.eps = 1e-6;
    s.step = 3 + flags;
    s.maximize = flags & 1;
    s.amsgrad = flags & 2;
    s.decoupled_weight_decay = flags & 4;
    s.weight_decay = (flags & 8) ? 0.1 : 0.0;
    SCOPED_TRACE(flags);
    check_adam_paths<float>(s);
    check_adam_paths<double>(s);
  }
}

TEST(FusedUpdates, SgdVectorAndScalarPathsAgree) {
  for (int flags = 0; flags < 32; ++flags) {
    SgdScalars s;
    s.lr = 0.1;
    s.maximize = flags & 1;
    s.weight_decay = (flags & 2) ? 0.01 : 0.0;
    s.momentum = (flags & 4) ? 0.9 : 0.0;
    s.dampening = (flags & 8) ? 0.1 : 0.0;
    s.nesterov = (flags & 16) && s.momentum != 0 && s.dampening == 0;
    SCOPED_TRACE(flags);
    for (bool init : {false, true}) {
      check_sgd_paths<float>(s, init);
      check_sgd_paths<double>(s, init);
    }
  }
}

TEST(FusedUpdates, SgdFirstStepCopiesTheDirectionIntoTheBuffer) {
  SgdScalars s;
  s.lr = 0.5;
  s.momentum = 0.9;
  s.dampening = 0.5;  // not applied on the first step (PyTorch clones d_p)
  s.weight_decay = 0.25;
  float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, 1.0f}, buf[2] = {123.0f, 456.0f};
  sgd_update(p, g, buf, /*buffer_initialized=*/false, 2, s);
  EXPECT_EQ(buf[0], 0.75f);  // 0.5 + 0.25 * 1
  EXPECT_EQ(buf[1], 0.5f);   // 1 + 0.25 * -2
  EXPECT_EQ(p[0], 0.625f);   // 1 - 0.5 * 0.75
  EXPECT_EQ(p[1], -2.25f);
}

TEST(FusedUpdates, AmsgradMaximumPropagatesNaN) {
  for (size_t n : {1u, 8u, 13u}) {
    AdamScalars s;
    s.amsgrad = true;
    std::vector<float> p(n, 1.0f), g(n, 0.5f), m(n, 0.0f), v(n, 0.0f), vmax(n, NAN);
    adam_update(p.data(), g.data(), m.data(), v.data(), vmax.data(), static_cast<int64_t>(n), s);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(std::isnan(vmax[i])) << i;
      EXPECT_TRUE(std::isnan(p[i])) << i;
      EXPECT_FALSE(std::isnan(v[i])) << i;
    }
  }
}

TEST(FusedUpdates, EmptyArrays) {
  AdamScalars a;
  SgdScalars s;
  s.momentum = 0.9;
  adam_update(static_cast<float*>(nullptr), nullptr, nullptr, nullptr, nullptr, 0, a);
  sgd_update(static_cast<double*>(nullptr), nullptr, nullptr, false, 0, s);
  SUCCEED();
}

}  // namespace
}  // namespace dp::backend::cpu::fused
