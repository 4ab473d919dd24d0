// A bare integer where a list of integers is expected, as libtorch allows: IntArrayRef takes one
// int64 (x.mean(1), x.sum(0), x.view(-1)), and the ops whose sizes take "one value or two" (pooling,
// conv2d's stride / padding / dilation) expand it; module options take ExpandingArray<2>
// (Conv2dOptions(1, 8, 3)). Checked at compile time (these calls must compile) and at run time
// (a bare int gives exactly what the explicit list gives).
#include <gtest/gtest.h>
#include <array>
#include <concepts>
#include <type_traits>
#include "dp/dp.h"
#include "dp/nn/nn.h"

namespace dp {
namespace {

// ---- compile time: each of these spellings is accepted ----
template <class T>
concept DimsTakeABareInt = requires(const T& x) {
  { x.mean(1) } -> std::same_as<T>;
  { x.mean({0, 1}) } -> std::same_as<T>;
  { x.mean(1, true) } -> std::same_as<T>;
  { x.sum(0) } -> std::same_as<T>;
  { x.sum({0, 1}, false) } -> std::same_as<T>;
  { x.view(-1) } -> std::same_as<T>;
  { x.reshape(-1) } -> std::same_as<T>;
  { x.var(0) } -> std::same_as<T>;
  { dp::sum(x, 1) } -> std::same_as<T>;
  { dp::mean(x, -1, true) } -> std::same_as<T>;
  { dp::amax(x, 0) } -> std::same_as<T>;
  { dp::logsumexp(x, 1) } -> std::same_as<T>;
  { dp::layer_norm(x, 4) } -> std::same_as<T>;
  { dp::zeros(5) } -> std::same_as<T>;
};
static_assert(DimsTakeABareInt<Tensor>);

template <class T>
concept SizesTakeABareInt = requires(const T& x) {
  { dp::max_pool2d(x, 2) } -> std::same_as<T>;
  { dp::max_pool2d(x, 3, 2, 1) } -> std::same_as<T>;
  { dp::avg_pool2d(x, 2) } -> std::same_as<T>;
  { dp::adaptive_avg_pool2d(x, 1) } -> std::same_as<T>;
  { dp::conv2d(x, x, T(), 2) } -> std::same_as<T>;
  { dp::conv2d(x, x, T(), /*stride=*/1, /*padding=*/1, /*dilation=*/2) } -> std::same_as<T>;
};
static_assert(SizesTakeABareInt<Tensor>);

static_assert(std::is_convertible_v<int64_t, IntArrayRef>);
static_assert(std::is_convertible_v<int, IntArrayRef>);
static_assert(std::is_constructible_v<nn::Conv2dOptions, int, int, int>);
static_assert(std::is_constructible_v<nn::MaxPool2dOptions, int>);
static_assert(std::is_convertible_v<int, nn::ExpandingArray<2>>);

// ---- run time ----
TEST(SizeArguments, OneIntIsAOneElementList) {
  const int64_t d = 3;
  const IntArrayRef r = d;  // views d (d outlives r here)
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], 3);
  EXPECT_EQ(r.data(), &d);
}

TEST(SizeArguments, ReductionsOverOneDimGiveTheListResult) {
  const Tensor x = arange(24, kFloat32).reshape({2, 3, 4});
  EXPECT_TRUE(equal(x.mean(1), x.mean({1})));
  EXPECT_EQ(x.mean(1).sizes(), (Shape{2, 4}));
  EXPECT_TRUE(equal(x.sum(0), x.sum({0})));
  EXPECT_EQ(x.sum(-1, true).sizes(), (Shape{2, 3, 1}));
  EXPECT_TRUE(equal(dp::sum(x, 2), dp::sum(x, {2})));
  EXPECT_TRUE(equal(dp::amax(x, 1), dp::amax(x, {1})));
  EXPECT_TRUE(allclose(x.var(0), x.var({0})));
  EXPECT_TRUE(allclose(dp::logsumexp(x, -1), dp::logsumexp(x, {-1})));
  // Several dims still take a braced list.
  EXPECT_EQ(x.mean({0, 2}).sizes(), (Shape{3}));
  EXPECT_EQ(x.view(-1).sizes(), (Shape{24}));
  EXPECT_EQ(dp::zeros(5).sizes(), (Shape{5}));
  // A dim variable works as well as a literal (it is viewed, not copied).
  for (int64_t dim = 0; dim < 3; ++dim) EXPECT_TRUE(equal(x.sum(dim), x.sum({dim}))) << dim;
}

TEST(SizeArguments, PoolingExpandsABareInt) {
  manual_seed(1);
  const Tensor x = randn({2, 3, 8, 8});
  EXPECT_TRUE(equal(max_pool2d(x, 2), max_pool2d(x, {2, 2}, {2, 2})));
  EXPECT_EQ(max_pool2d(x, 2).sizes(), (Shape{2, 3, 4, 4}));
  EXPECT_TRUE(equal(max_pool2d(x, 3, 2, 1), max_pool2d(x, {3, 3}, {2, 2}, {1, 1})));
  EXPECT_TRUE(equal(avg_pool2d(x, 2), avg_pool2d(x, {2, 2}, {2, 2})));
  EXPECT_TRUE(equal(avg_pool2d(x, 3, 1, 1), avg_pool2d(x, {3, 3}, {1, 1}, {1, 1})));
  EXPECT_TRUE(equal(adaptive_avg_pool2d(x, 1), adaptive_avg_pool2d(x, {1, 1})));
  EXPECT_EQ(adaptive_avg_pool2d(x, 1).sizes(), (Shape{2, 3, 1, 1}));
}

TEST(SizeArguments, Conv2dExpandsABareInt) {
  manual_seed(2);
  const Tensor x = randn({1, 2, 7, 7}), w = randn({4, 2, 3, 3}), b = randn({4});
  EXPECT_TRUE(equal(conv2d(x, w, b, 2), conv2d(x, w, b, {2, 2})));
  EXPECT_TRUE(equal(conv2d(x, w, b, 1, 1), conv2d(x, w, b, {1, 1}, {1, 1})));
  EXPECT_TRUE(equal(conv2d(x, w, b, 1, 2, 2), conv2d(x, w, b, {1, 1}, {2, 2}, {2, 2})));
  EXPECT_EQ(conv2d(x, w, b, 2).sizes(), (Shape{1, 4, 3, 3}));
}

TEST(SizeArguments, ModuleOptionsExpandABareInt) {
  const nn::Conv2dOptions o = nn::Conv2dOptions(1, 8, 3).stride(2).padding(1);
  EXPECT_EQ(o.kernel_size().values(), (std::array<int64_t, 2>{3, 3}));
  EXPECT_EQ(o.stride().values(), (std::array<int64_t, 2>{2, 2}));
  EXPECT_EQ(o.padding().values(), (std::array<int64_t, 2>{1, 1}));
  const nn::MaxPool2dOptions p = nn::MaxPool2dOptions(2).stride({1, 2});
  EXPECT_EQ(p.kernel_size().values(), (std::array<int64_t, 2>{2, 2}));
  EXPECT_EQ(p.stride().values(), (std::array<int64_t, 2>{1, 2}));
  manual_seed(3);
  nn::Conv2d conv(nn::Conv2dOptions(1, 8, 3));
  EXPECT_EQ(conv->weight.sizes(), (Shape{8, 1, 3, 3}));
}

TEST(SizeArguments, BadCountsAreStillErrors) {
  const Tensor x = randn({1, 1, 4, 4});
  // Three values where one or two are allowed: the ops' own check names op and sizes.
  EXPECT_THROW(max_pool2d(x, {2, 2, 2}), Error);
  EXPECT_THROW(nn::ExpandingArray<2>({1, 2, 3}), ValueError);
  // A bare int is a dim like any other: out of range is an IndexError.
  EXPECT_THROW(x.sum(4), IndexError);
}

}  // namespace
}  // namespace dp
