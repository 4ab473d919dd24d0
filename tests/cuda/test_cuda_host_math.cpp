// Host-side parts of the CUDA element-wise backend, run on any machine: the offset calculator's
// index math (cuda/offset_calculator.h, compiled here by the host compiler) and the shared functors
// (backend/elementwise_impl.h) on the CPU.
#include <gtest/gtest.h>
#include <cmath>
#include <vector>
#include "dp/core/generator.h"
#include "backend/elementwise_impl.h"
#include "backend/cuda/offset_calculator.h"

namespace dp {
namespace {

using backend::cuda::detail::make_offset_calculator;

// Naive byte offsets of element `linear` of `shape` for each operand.
std::vector<int64_t> naive(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& strides, int64_t linear) {
  std::vector<int64_t> off(strides.size(), 0);
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const int64_t r = linear % shape[d];
    linear /= shape[d];
    for (size_t k = 0; k < strides.size(); ++k) off[k] += r * strides[k][d];
  }
  return off;
}

template <typename I>
void check_all(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& strides, int expect_dims = -1) {
  ASSERT_EQ(strides.size(), 3u);
  const int64_t* rows[3] = {strides[0].data(), strides[1].data(), strides[2].data()};
  auto oc = make_offset_calculator<3, I>(static_cast<int>(shape.size()), shape.data(), rows);
  if (expect_dims >= 0) {
    EXPECT_EQ(oc.dims, expect_dims);
  }
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  for (int64_t i = 0; i < n; ++i) {
    const auto got = oc.get(static_cast<I>(i));
    const auto want = naive(shape, strides, i);
    for (int k = 0; k < 3; ++k) ASSERT_EQ(got.v[k], want[k]) << "element " << i << " operand " << k;
  }
}

TEST(CudaOffsetCalculator, ContiguousCoalescesToOneDim) {
  // out float32 contiguous 2x3x4, a the same, b int8 contiguous.
  check_all<uint32_t>({2, 3, 4}, {{48, 16, 4}, {48, 16, 4}, {12, 4, 1}}, 1);
}

TEST(CudaOffsetCalculator, BroadcastRowAndColumn) {
  // out 4x5 contiguous; a broadcast along rows (5,), b a column (4, 1).
  check_all<uint32_t>({4, 5}, {{20, 4}, {0, 4}, {4, 0}}, 2);
  check_all<uint64_t>({4, 5}, {{20, 4}, {0, 4}, {4, 0}}, 2);
}

TEST(CudaOffsetCalculator, TransposedAndSlicedOperands) {
  // out 3x4x2 contiguous (float), a a transposed view, b a strided slice with size-1 dim.
  check_all<uint32_t>({3, 1, 4, 2}, {{32, 32, 8, 4}, {4, 0, 12 * 4, 48 * 4}, {200, 0, 24, 8}});
}

TEST(CudaOffsetCalculator, DropsSizeOneDimsAndRejectsTooMany) {
  std::vector<int64_t> shape(30, 1);
  std::vector<std::vector<int64_t>> st(3, std::vector<int64_t>(30, 0));
  check_all<uint32_t>(shape, st, 0);
  // 30 dims of size 2 with strides that cannot merge: more than kMaxDims.
  std::vector<int64_t> s2(30, 2);
  std::vector<int64_t> bad(30);
  for (int d = 0; d < 30; ++d) bad[d] = int64_t{3} << (2 * (29 - d));
  const int64_t* rows[3] = {bad.data(), bad.data(), bad.data()};
  EXPECT_THROW((make_offset_calculator<3, uint64_t>(30, s2.data(), rows)), NotImplementedError);
}

// Philox: the kernels inline backend::philox4x32_rounds, the same function dp::philox4x32 calls (its
// known-answer test is in tests/ops/test_random.cpp).

TEST(SharedElementFunctors, MatchTheirDefinitionsOnTheHost) {
  using namespace backend::impl;
  EXPECT_EQ((AddAlphaF<float>{2.0f})(1.0f, 3.0f), 7.0f);
  EXPECT_EQ((AddAlphaF<int32_t>{2})(INT32_MAX, 1), INT32_MIN + 1);  // wraps
  EXPECT_EQ((PowConstF<float, -1>{0.0f})(4.0f), 0.25f);
  EXPECT_EQ((RpowConstF<int64_t>{2})(10), 1024);
  EXPECT_TRUE(std::isnan((MaximumF<float>{})(NAN, 1.0f)));
  EXPECT_EQ((ExtremumWeightF<double, true>{})(2.0, 2.0), 0.5);
  EXPECT_EQ((LerpFarF<float>{0.0f})(1.0f, 5.0f), 5.0f);
  EXPECT_EQ((ReluF<float>{})(-2.0f), 0.0f);
  EXPECT_TRUE(std::isnan((ReluF<float>{})(NAN)));
  EXPECT_EQ(static_cast<float>((SignF<BFloat16>{})(BFloat16(-3.0f))), -1.0f);
  EXPECT_NEAR((FloatingUnaryF<double, SigmoidF>{})(0.0), 0.5, 1e-15);
  EXPECT_NEAR((FloatingUnaryF<float, GeluF>{})(1.0f), 0.841344746f, 1e-6f);
  EXPECT_NEAR((SiluGradF<double>{})(1.0, 0.0), 0.5, 1e-15);
  EXPECT_TRUE((CompareConstF<Half, LeOp>{1.5f})(Half(1.5f)));
  EXPECT_TRUE((LogicalNotF<float>{})(0.0f));
  EXPECT_EQ((ClampF<int64_t>{-1, 1})(5), 1);
  EXPECT_FALSE((ClampMaskF<float>{0.0f, 1.0f})(2.0f));
}

}  // namespace
}  // namespace dp
