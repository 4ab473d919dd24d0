// max_pool2d / avg_pool2d / adaptive_avg_pool2d: forward, indices and backward against PyTorch
// (tests/golden/gen_conv.py) over kernel, stride, padding, dilation, ceil_mode (including the
// last-window rule), count_include_pad, divisor_override, ties, batch 1 and unbatched inputs;
// finite-difference gradcheck to second order in float64; output-size edge cases; errors.
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>
#include "dp/ops/pooling.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_file;
using test::gradcheck;
using test::json;
using test::rand_leaf;
using test::tensor_from_json;

constexpr const char* kFile = "conv.json";

Shape ints(const json& j) { return j.is_null() ? Shape{} : j.get<Shape>(); }
double tol(const Tensor& t) { return t.dtype() == kFloat64 ? 1e-12 : 1e-5; }

// Runs every golden case of `op`, checking output, (indices) and the input gradient.
template <typename F>
int run_cases(const std::string& op, F&& forward) {
  int n = 0;
  for (const json& c : golden_file(kFile).at("cases")) {
    if (c.at("op") != op) continue;
    ++n;
    SCOPED_TRACE(c.at("name").get<std::string>());
    Tensor x = tensor_from_json(c.at("inputs")[0], true);
    Tensor y = forward(x, c.at("args"), c);
    EXPECT_TRUE(all_close(y, c.at("output"), tol(x), tol(x)));
    y.backward(tensor_from_json(c.at("grad_output")));
    EXPECT_TRUE(all_close(x.grad(), c.at("grads")[0], tol(x), tol(x))) << "grad input";
  }
  return n;
}

TEST(PoolGolden, MaxPool) {
  int n = run_cases("max_pool2d", [](const Tensor& x, const json& a, const json& c) {
    auto [y, idx] = max_pool2d_with_indices(x, ints(a.at("kernel_size")), ints(a.at("stride")), ints(a.at("padding")), ints(a.at("dilation")),
                                            a.at("ceil_mode").get<bool>());
    EXPECT_EQ(idx.dtype(), kInt64);
    EXPECT_EQ(idx.to_vector<int64_t>(), tensor_from_json(c.at("indices")).to_vector<int64_t>()) << "indices";
    Tensor y2 = max_pool2d(x.detach(), ints(a.at("kernel_size")), ints(a.at("stride")), ints(a.at("padding")), ints(a.at("dilation")),
                           a.at("ceil_mode").get<bool>());
    EXPECT_TRUE(equal(y2, y.detach()));
    return y;
  });
  EXPECT_GE(n, 15);
}

TEST(PoolGolden, AvgPool) {
  int n = run_cases("avg_pool2d", [](const Tensor& x, const json& a, const json&) {
    std::optional<int64_t> div;
    if (!a.at("divisor_override").is_null()) div = a.at("divisor_override").get<int64_t>();
    return avg_pool2d(x, ints(a.at("kernel_size")), ints(a.at("stride")), ints(a.at("padding")), a.at("ceil_mode").get<bool>(),
                      a.at("count_include_pad").get<bool>(), div);
  });
  EXPECT_GE(n, 10);
}

TEST(PoolGolden, AdaptiveAvgPool) {
  int n =
      run_cases("adaptive_avg_pool2d", [](const Tensor& x, const json& a, const json&) { return adaptive_avg_pool2d(x, ints(a.at("output_size"))); });
  EXPECT_GE(n, 6);
}

TEST(Pool, OutputSizes) {
  // PyTorch's pooling_output_shape, including the ceil_mode rule that the last window must
  // start inside the input or its left padding.
  Tensor x = zeros({1, 1, 5, 5});
  EXPECT_EQ(max_pool2d(x, {2}, {2}, {1}, {1}, true).sizes(), (Shape{1, 1, 3, 3}));  // ceil gives 4, dropped to 3
  EXPECT_EQ(max_pool2d(x, {2}, {2}, {0}, {1}, true).sizes(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(max_pool2d(x, {2}, {2}, {0}, {1}, false).sizes(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(max_pool2d(x, {3}, {1}, {1}, {2}).sizes(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(avg_pool2d(zeros({2, 6, 7}), {3, 2}, {2, 3}, {1, 0}, true).sizes(), (Shape{2, 4, 3}));
  EXPECT_EQ(adaptive_avg_pool2d(zeros({2, 3, 5, 4}), {1}).sizes(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(adaptive_avg_pool2d(zeros({2, 3, 5, 4}), {2, 0}).sizes(), (Shape{2, 3, 2, 0}));
  EXPECT_EQ(max_pool2d(zeros({0, 3, 4, 4}), {2}).sizes(), (Shape{0, 3, 2, 2}));
}

TEST(Pool, NaNPropagatesThroughMax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = tensor<float>({1, nan, 3, 2, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  auto [y, idx] = max_pool2d_with_indices(x, {2}, {1});
  std::vector<float> v = y.to_vector<float>();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 8.0f);
  EXPECT_EQ(v[3], 9.0f);
  EXPECT_EQ(idx.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 7, 8}));
}

TEST(Pool, NonContiguousInput) {
  manual_seed(5);
  Tensor x = randn({2, 3, 7, 6});
  Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TRUE(equal(max_pool2d(xt, {3}, {2}, {1}), max_pool2d(x, {3}, {2}, {1})));
  EXPECT_TRUE(equal(avg_pool2d(xt, {2}), avg_pool2d(x, {2})));
  EXPECT_TRUE(equal(adaptive_avg_pool2d(xt, {3, 2}), adaptive_avg_pool2d(x, {3, 2})));
}

// ---- finite differences (float64), first and second order ----

using dp::test::gradgradcheck;

::testing::AssertionResult check(const test::TensorFn& f, const Tensor& x) {
  ::testing::AssertionResult first = gradcheck(f, {x});
  if (!first) return first;
  // Pooling is linear in x, so the backward's own backward is checked through v, and through a
  // nonlinear use of the output (y * y) that makes the gradient depend on x.
  ::testing::AssertionResult second = gradgradcheck(f, {x});
  if (!second) return second;
  return gradgradcheck(
      [f](const std::vector<Tensor>& t) {
        Tensor y = f(t);
        return y * y;
      },
      {x});
}

TEST(PoolGrad, MaxPool) {
  manual_seed(21);
  // Distinct values keep every window's maximum away from a tie under the finite-difference step.
  auto leaf = [](const Shape& s) { return (randperm(numel_of(s)).to(kFloat64) * 0.1).reshape(s).detach().requires_grad_(true); };
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return max_pool2d(t[0], {2}); }, leaf({2, 2, 4, 4})));
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return max_pool2d(t[0], {3}, {2}, {1}, {1}, true); }, leaf({1, 2, 5, 6})));
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return max_pool2d(t[0], {2, 3}, {1, 2}, {1, 0}, {2, 1}); }, leaf({1, 2, 6, 7})));
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return max_pool2d(t[0], {2}, {1}); }, leaf({2, 4, 3})));
}

TEST(PoolGrad, AvgPool) {
  manual_seed(22);
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], {2}); }, rand_leaf({2, 2, 4, 4})));
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], {3}, {2}, {1}, true, false); }, rand_leaf({1, 2, 5, 6})));
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], {3, 2}, {2, 1}, {1}, true, true); }, rand_leaf({1, 2, 6, 5})));
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], {2}, {1}, {1}, false, true, 3); }, rand_leaf({2, 3, 3})));
}

TEST(PoolGrad, AdaptiveAvgPool) {
  manual_seed(23);
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return adaptive_avg_pool2d(t[0], {3, 2}); }, rand_leaf({2, 2, 5, 5})));
  EXPECT_TRUE(check([](const std::vector<Tensor>& t) { return adaptive_avg_pool2d(t[0], {4}); }, rand_leaf({1, 3, 3})));
}

// ---- errors ----

template <typename E, typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing \"" << needle << "\"";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PoolErrors, MaxPool) {
  Tensor x = randn({1, 2, 5, 5});
  expect_error<ValueError>([&] { max_pool2d(x, {3}, {1}, {2}); }, "pad should be at most half of kernel size, but got pad=2 and kernel_size=3");
  expect_error<ValueError>([&] { max_pool2d(x, {3, 2}, {1}, {1, 2}); }, "pad=2 and kernel_size=2");
  expect_error<ValueError>([&] { max_pool2d(x, {2}, {0}); }, "stride should be greater than zero");
  expect_error<ValueError>([&] { max_pool2d(x, {0}); }, "kernel size should be greater than zero");
  expect_error<ValueError>([&] { max_pool2d(x, {2}, {}, {0}, {0}); }, "dilation should be greater than zero");
  expect_error<ValueError>([&] { max_pool2d(x, {2}, {}, {-1}); }, "pad must be non-negative");
  expect_error<ShapeError>([&] { max_pool2d(x, {7}); }, "Given input size: (2x5x5). Calculated output size: (2x0x0). Output size is too small");
  expect_error<ShapeError>([&] { max_pool2d(randn({5, 5}), {2}); }, "Expected 3D or 4D (batch mode) tensor");
  expect_error<ShapeError>([&] { max_pool2d(zeros({1, 0, 4, 4}), {2}); }, "but got: [1, 0, 4, 4]");
  expect_error<ValueError>([&] { max_pool2d(x, {1, 2, 3}); }, "kernel_size must either be a single int, or a tuple of two ints");
  expect_error<ValueError>([&] { max_pool2d(x, {2}, {1, 1, 1}); }, "stride must either be omitted, a single int, or a tuple of two ints");
  expect_error<DTypeError>([&] { max_pool2d(x.to(kInt64), {2}); }, "expected a float32, float64 or bfloat16 input, but got int64");
}

TEST(PoolErrors, AvgAndAdaptive) {
  Tensor x = randn({1, 2, 5, 5});
  expect_error<ValueError>([&] { avg_pool2d(x, {3}, {1}, {2}); }, "pad should be at most half of kernel size");
  expect_error<ValueError>([&] { avg_pool2d(x, {2}, {}, {0}, false, true, 0); }, "divisor must be not zero");
  expect_error<ShapeError>([&] { avg_pool2d(x, {7}); }, "Output size is too small");
  expect_error<ValueError>([&] { adaptive_avg_pool2d(x, {1, 2, 3}); }, "output_size must be 2");
  expect_error<ValueError>([&] { adaptive_avg_pool2d(x, {-1, 2}); }, "greater than or equal to 0");
  expect_error<ShapeError>(
      [&] {
        adaptive_avg_pool2d(zeros({1, 2, 0, 3}), {2});
      },
      "Expected input to have non-zero size for non-batch dimensions, but input has sizes [1, 2, 0, 3] with dimension 2 being empty");
  expect_error<ShapeError>([&] { adaptive_avg_pool2d(randn({4}), {2}); }, "Expected 3D or 4D tensor");
}

}  // namespace
}  // namespace dp
