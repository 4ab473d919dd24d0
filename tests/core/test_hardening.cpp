// Hardening (docs/hardening.md), core cases: sizes whose element count, strides or byte count
// overflow int64 are a ShapeError wherever a tensor is made (one checked computation, make_empty /
// sizes_fit), and exp / sigmoid of NaN and infinities are defined (no float-to-int cast of NaN in
// the vectorised exp: the UBSan build, scripts/sanitize.sh address, aborts on one).
#include <gtest/gtest.h>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "dp/nn/nn.h"

namespace dp {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

template <typename F>
std::string shape_error_of(F&& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected dp::ShapeError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected dp::ShapeError, nothing was thrown";
  return "";
}

TEST(SizeOverflow, EmptyWhoseElementCountOverflows) {
  const std::string m = shape_error_of([] { empty({5, kMax}); });
  EXPECT_NE(m.find("[5, 9223372036854775807]"), std::string::npos) << m;
  EXPECT_NE(m.find("overflows int64"), std::string::npos) << m;
}

TEST(SizeOverflow, ZerosOfTwoToThe64Elements) {
  const int64_t big = int64_t(1) << 32;
  const std::string m = shape_error_of([&] { zeros({big, big}); });
  EXPECT_NE(m.find("[4294967296, 4294967296]"), std::string::npos) << m;
  // Every factory goes through the same check.
  shape_error_of([&] { ones({big, big}); });
  shape_error_of([&] { full({big, big}, 1.0); });
  shape_error_of([&] { rand({big, big}); });
}

TEST(SizeOverflow, ByteCountOverflowsEvenWhenTheElementCountFits) {
  // 2^61 float64 elements: the count fits int64, 2^64 bytes do not.
  const std::string m = shape_error_of([] { empty({int64_t(1) << 61}, TensorOptions().dtype(kFloat64)); });
  EXPECT_NE(m.find("float64"), std::string::npos) << m;
}

TEST(SizeOverflow, RuleDoesNotDependOnTheOrderOfDimensions) {
  const int64_t t40 = int64_t(1) << 40;
  // Zero elements, but the strides of [0, 2^40, 2^40] (2^80) overflow: refused in every order.
  for (std::vector<int64_t> s : {std::vector<int64_t>{0, t40, t40}, {t40, 0, t40}, {t40, t40, 0}}) {
    EXPECT_FALSE(sizes_fit(s, 4, nullptr, nullptr)) << shape_str(s);
    shape_error_of([&] { dp::empty(s); });
  }
  int64_t n = -1, bytes = -1;
  EXPECT_TRUE(sizes_fit(std::vector<int64_t>{0, t40}, 4, &n, &bytes));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(bytes, 0);
  EXPECT_TRUE(sizes_fit(std::vector<int64_t>{3, 5}, 8, &n, &bytes));
  EXPECT_EQ(n, 15);
  EXPECT_EQ(bytes, 120);
  EXPECT_FALSE(sizes_fit(std::vector<int64_t>{3, -1}, 8, &n, &bytes));
  // The element count and the strides overflow in the same dimension (found by fuzzing: the count
  // was multiplied before the check, a signed overflow UBSan reports).
  EXPECT_FALSE(sizes_fit(std::vector<int64_t>{int64_t(1) << 62, 4}, 4, &n, &bytes));
  EXPECT_FALSE(sizes_fit(std::vector<int64_t>{4, int64_t(1) << 62}, 1, &n, &bytes));
  // A valid empty tensor with a large dimension is still fine.
  Tensor t = empty({0, t40});
  EXPECT_EQ(t.numel(), 0);
}

TEST(SizeOverflow, NegativeDimensionStillNamed) {
  const std::string m = shape_error_of([] { empty({2, -3}); });
  EXPECT_NE(m.find("negative dimension"), std::string::npos) << m;
}

TEST(SizeOverflow, LinearWithAnAbsurdWidth) {
  shape_error_of([] { nn::Linear(784, kMax); });
  shape_error_of([] { nn::Linear(kMax, 10); });
}

TEST(SizeOverflow, ViewsAndExpandCannotOverflowTheCount) {
  Tensor s = ones({1, 1});
  const int64_t big = int64_t(1) << 32;
  shape_error_of([&] { (void)s.expand({big, big}); });
}

TEST(SizeOverflow, HugeButRepresentableRequestIsOutOfMemory) {
  // 2^62 bytes fits int64 but no machine has it: a clear OutOfMemory, not a crash.
  EXPECT_THROW(empty({int64_t(1) << 60}, TensorOptions().dtype(kFloat32)), OutOfMemory);
}

TEST(ExpOfNaN, ExpAndSigmoidOfNaNAndInfinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Long enough for the vectorised loop as well as the tail.
  std::vector<float> x;
  for (int i = 0; i < 37; ++i) x.push_back(i % 3 == 0 ? nan : (i % 3 == 1 ? inf : -inf));
  Tensor t = tensor(x);
  const std::vector<float> e = t.exp().to_vector<float>();
  const std::vector<float> s = t.sigmoid().to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(e[i])) << i;
      EXPECT_TRUE(std::isnan(s[i])) << i;
    } else if (x[i] > 0) {
      EXPECT_EQ(e[i], inf) << i;
      EXPECT_EQ(s[i], 1.0f) << i;
    } else {
      EXPECT_EQ(e[i], 0.0f) << i;
      EXPECT_EQ(s[i], 0.0f) << i;
    }
  }
  // Ops built on exp: tanh, softmax, logsumexp, erf (gelu).
  EXPECT_TRUE(std::isnan(tensor(std::vector<float>{nan}).tanh().item<float>()));
  EXPECT_TRUE(std::isnan(tensor(std::vector<float>{nan, 1.0f}).softmax(0).to_vector<float>()[1]));
  EXPECT_TRUE(std::isnan(dp::gelu(tensor(std::vector<float>{nan})).item<float>()));
  EXPECT_FLOAT_EQ(tensor(std::vector<float>{0.0f}).exp().item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(tensor(std::vector<float>{1e30f}).exp().item<float>(), inf);
  EXPECT_FLOAT_EQ(tensor(std::vector<float>{-1e30f}).exp().item<float>(), 0.0f);
}

}  // namespace
}  // namespace dp
