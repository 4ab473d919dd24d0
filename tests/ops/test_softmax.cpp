// softmax / log_softmax: values against a float64 reference on shapes that cross the kernels'
// row and column-block paths, non-finite inputs, the fused backward kernel against the dp-op
// formula used under create_graph, gradcheck and double backward.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <random>
#include "backend/cpu/reduce.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;
using test::gradcheck;
using test::rand_leaf;

Tensor randn_f32(const Shape& shape, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  std::vector<float> v(static_cast<size_t>(numel_of(shape)));
  for (float& e : v) e = static_cast<float>(nd(gen) * scale);
  return tensor<float>(v, shape);
}

// softmax (or log_softmax) over `dim` of a contiguous tensor, in float64 from its float values.
Tensor reference_softmax(const Tensor& x, int64_t dim, bool log) {
  std::vector<double> v = x.to_vector<double>();
  int64_t outer = 1, n = x.sizes()[dim], inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.sizes()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.sizes()[d];
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return o * n * inner + k * inner + i; };
      double m = -INFINITY;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, v[at(k)]);
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += std::exp(v[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) out[at(k)] = log ? v[at(k)] - m - std::log(s) : std::exp(v[at(k)] - m) / s;
    }
  return tensor<double>(out, x.sizes());
}

::testing::AssertionResult check1(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  return gradcheck([f](const std::vector<Tensor>& xs) { return f(xs[0]); }, {x});
}

::testing::AssertionResult check_grad_grad(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  Tensor v = rand(f(x).sizes(), kFloat64);
  test::TensorFn first = [f, v](const std::vector<Tensor>& xs) {
    AutoGradMode on(true);
    Tensor leaf = xs[0].requires_grad() ? xs[0] : xs[0].detach().requires_grad_(true);
    Tensor y = f(leaf);
    return autograd::grad({y}, {leaf}, {v}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  };
  return gradcheck(first, {x});
}

struct Case {
  Shape shape;
  int64_t dim;
};

// Rows (last dim, long and short), column blocks (inner > 1 and inner > 1024: two blocks), and
// middle dims.
const std::vector<Case> kCases = {
    {{64, 1000}, 1}, {{300, 7}, -1}, {{3, 5}, 1}, {{2000, 33}, 0}, {{40, 2, 1100}, 1}, {{4, 9, 5, 6}, 2}, {{1025, 3}, 0}, {{7, 1}, 1},
};

TEST(Softmax, MatchesFloat64) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    Tensor x = randn_f32(c.shape, seed++, 3.0);
    const int64_t d = c.dim < 0 ? c.dim + x.dim() : c.dim;
    SCOPED_TRACE(::testing::Message() << shape_str(c.shape) << " dim " << c.dim);
    EXPECT_TRUE(all_close(softmax(x, c.dim), reference_softmax(x, d, false), 2e-6, 1e-9));
    EXPECT_TRUE(all_close(log_softmax(x, c.dim), reference_softmax(x, d, true), 2e-6, 4e-6));
    Tensor xd = x.to(kFloat64);
    EXPECT_TRUE(all_close(softmax(xd, c.dim), reference_softmax(x, d, false), 1e-12, 1e-15));
    EXPECT_TRUE(all_close(log_softmax(xd, c.dim), reference_softmax(x, d, true), 1e-12, 1e-12));
  }
}

TEST(Softmax, RowsSumToOne) {
  Tensor x = randn_f32({128, 1024}, 3, 10.0);
  Tensor s = sum(softmax(x, 1), {1});
  for (double v : s.to_vector<double>()) EXPECT_NEAR(v, 1.0, 2e-6);
  Tensor s0 = sum(softmax(x, 0), {0});
  for (double v : s0.to_vector<double>()) EXPECT_NEAR(v, 1.0, 2e-6);
}

TEST(Softmax, NonContiguousInput) {
  Tensor base = randn_f32({6, 50}, 8);
  Tensor xt = backend::restride_nograd(base, {50, 6}, {1, 50});  // the transpose
  ASSERT_FALSE(xt.is_contiguous());
  Tensor copy = xt.contiguous();
  for (int64_t dim : {0, 1}) {
    Tensor y = softmax(xt, dim);
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_TRUE(all_close(y, softmax(copy, dim), 0, 0));
    EXPECT_TRUE(all_close(log_softmax(xt, dim), log_softmax(copy, dim), 0, 0));
  }
}

TEST(Softmax, NonFiniteInputs) {
  const float inf = INFINITY, nan = std::nanf("");
  // -inf (a mask) gives exactly 0 / -inf; a row of only -inf, a NaN or +inf gives NaN (PyTorch).
  Tensor x = tensor<float>({-inf, 1, 2, 0, -inf, -inf, -inf, -inf, -inf, 1, nan, 2, 1, inf, 0}, {5, 3});
  std::vector<double> y = softmax(x, 1).to_vector<double>();
  std::vector<double> l = log_softmax(x, 1).to_vector<double>();
  EXPECT_EQ(y[0], 0.0);
  EXPECT_NEAR(y[1] + y[2], 1.0, 1e-6);
  EXPECT_EQ(y[3], 1.0);
  EXPECT_EQ(y[4], 0.0);
  EXPECT_EQ(l[0], -inf);
  EXPECT_EQ(l[3], 0.0);
  EXPECT_EQ(l[5], -inf);
  for (int k = 6; k < 15; ++k) {
    EXPECT_TRUE(std::isnan(y[k])) << k;
    EXPECT_TRUE(std::isnan(l[k])) << k;
  }
  // Huge finite values are stable (max-subtracted).
  Tensor big = tensor<float>({1e30f, 1e30f, -1e30f, 80, 90, 100}, {2, 3});
  std::vector<double> b = softmax(big, 1).to_vector<double>();
  EXPECT_NEAR(b[0], 0.5, 1e-7);
  EXPECT_EQ(b[2], 0.0);
  EXPECT_NEAR(b[5], 1.0 / (1.0 + std::exp(-10.0) + std::exp(-20.0)), 1e-6);
  // Columns (dim 0): the same rules.
  Tensor xc = tensor<float>({-inf, nan, 1, 1, -inf, 0}, {3, 2});
  std::vector<double> yc = softmax(xc, 0).to_vector<double>();
  std::vector<double> lc = log_softmax(xc, 0).to_vector<double>();
  EXPECT_EQ(yc[0], 0.0);
  EXPECT_EQ(yc[2], 1.0);
  EXPECT_EQ(yc[4], 0.0);
  EXPECT_EQ(lc[0], -inf);
  EXPECT_EQ(lc[2], 0.0);
  for (int k : {1, 3, 5}) {
    EXPECT_TRUE(std::isnan(yc[k])) << k;
    EXPECT_TRUE(std::isnan(lc[k])) << k;
  }
}

TEST(Softmax, HalfPrecisionComputesInFloat) {
  Tensor x = randn_f32({5, 40}, 4, 2.0);
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor xh = x.to(dt);
    Tensor y = softmax(xh, 1);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(all_close(y, softmax(xh.to(kFloat32), 1).to(dt), 0, 0));
    EXPECT_TRUE(all_close(log_softmax(xh, 0), log_softmax(xh.to(kFloat32), 0).to(dt), 0, 0));
  }
}

TEST(Softmax, Gradcheck) {
  Tensor x = rand_leaf({3, 4, 5}, -2, 2);
  for (int64_t dim : {0, 1, 2, -1}) {
    SCOPED_TRACE(dim);
    EXPECT_TRUE(check1([dim](const Tensor& t) { return softmax(t, dim); }, x));
    EXPECT_TRUE(check1([dim](const Tensor& t) { return log_softmax(t, dim); }, x));
  }
  Tensor base = rand({5, 3}, kFloat64);
  Tensor xt = backend::restride_nograd(base, {3, 5}, {1, 3}).requires_grad_(true);
  EXPECT_TRUE(check1([](const Tensor& t) { return softmax(t, 1); }, xt));
  EXPECT_TRUE(check1([](const Tensor& t) { return log_softmax(t, 0); }, xt));
  EXPECT_TRUE(check1([](const Tensor& t) { return softmax(t, 0); }, rand_leaf({})));
}

TEST(Softmax, DoubleBackward) {
  Tensor x = rand_leaf({3, 4}, -2, 2);
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE(dim);
    EXPECT_TRUE(check_grad_grad([dim](const Tensor& t) { return softmax(t, dim); }, x));
    EXPECT_TRUE(check_grad_grad([dim](const Tensor& t) { return log_softmax(t, dim); }, x));
  }
  // Through a loss: cross-entropy-like nll of log_softmax, differentiated twice.
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return sum(log_softmax(t, 1) * t); }, x));
}

// The fused backward kernel against the formula in dp ops, and the create_graph backward (a node
// of its own, differentiable) against both.
TEST(Softmax, FusedBackwardMatchesFormula) {
  uint32_t seed = 20;
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << shape_str(c.shape) << " dim " << c.dim);
    for (bool log : {false, true}) {
      Tensor x = randn_f32(c.shape, seed++, 2.0).requires_grad_(true);
      Tensor g = randn_f32(c.shape, seed++);
      Tensor y = log ? log_softmax(x, c.dim) : softmax(x, c.dim);
      Tensor fused = autograd::grad({y}, {x}, {g}, /*retain_graph=*/true, /*create_graph=*/false)[0];
      Tensor recorded = autograd::grad({y}, {x}, {g}, /*retain_graph=*/false, /*create_graph=*/true)[0];
      EXPECT_FALSE(fused.requires_grad());
      ASSERT_TRUE(recorded.requires_grad());
      EXPECT_EQ(recorded.grad_fn()->name(), log ? "LogSoftmaxBackwardDataBackward0" : "SoftmaxBackwardDataBackward0");
      Tensor yd = y.detach().to(kFloat64), gd = g.to(kFloat64);
      Tensor formula = log ? gd - exp(yd) * sum(gd, {c.dim}, true) : yd * (gd - sum(gd * yd, {c.dim}, true));
      EXPECT_TRUE(all_close(fused, formula, 1e-4, 1e-6));
      EXPECT_TRUE(all_close(recorded.detach(), fused, 0, 0));
    }
  }
}

TEST(Softmax, BackwardWithBroadcastGradient) {
  // loss = softmax(x).sum(): the incoming gradient is an expanded (stride 0) ones tensor and the
  // gradient is 0 (every row sums to 1).
  Tensor x = randn_f32({8, 300}, 5).requires_grad_(true);
  sum(softmax(x, 1)).backward();
  for (double v : x.grad().to_vector<double>()) EXPECT_NEAR(v, 0.0, 1e-6);
  // loss = log_softmax(x).sum(): gradient 1 - n * softmax.
  Tensor x2 = randn_f32({4, 50}, 6).requires_grad_(true);
  sum(log_softmax(x2, 1)).backward();
  Tensor expect = 1.0 - softmax(x2.detach(), 1) * 50.0;
  EXPECT_TRUE(all_close(x2.grad(), expect, 1e-5, 1e-5));
}

TEST(Softmax, BackwardNeedsOnlyTheOutput) {
  // Only the result is saved (as PyTorch): changing the input in place afterwards is fine, for the
  // first and for the second derivative.
  for (bool log : {false, true}) {
    Tensor leaf = randn_f32({3, 4}, 7).to(kFloat64).requires_grad_(true);
    Tensor x = leaf * 1.0;
    Tensor y = log ? log_softmax(x, 1) : softmax(x, 1);
    x.mul_(2.0);
    Tensor g = rand({3, 4}, kFloat64);
    EXPECT_NO_THROW(autograd::grad({y}, {leaf}, {g}, /*retain_graph=*/true));
    Tensor gi = autograd::grad({y}, {leaf}, {g}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    EXPECT_NO_THROW(autograd::grad({sum(gi * gi)}, {leaf}, {}, /*retain_graph=*/true));
    // Third derivatives would need the result's own history: refused, not silently wrong.
    Tensor gg = autograd::grad({sum(gi * gi)}, {leaf}, {}, /*retain_graph=*/true, /*create_graph=*/false)[0];
    EXPECT_EQ(gg.sizes(), leaf.sizes());
    EXPECT_THROW(autograd::grad({sum(gi * gi)}, {leaf}, {}, /*retain_graph=*/true, /*create_graph=*/true), NotImplementedError);
  }
}

TEST(Softmax, SecondDerivativeWithRespectToTheIncomingGradient) {
  // d/dg of <softmax backward(g), w> is the softmax backward of w: checks the edge to g.
  Tensor x = rand_leaf({2, 5});
  Tensor g = rand_leaf({2, 5});
  Tensor w = rand({2, 5}, kFloat64);
  Tensor y = softmax(x, 1);
  Tensor gi = autograd::grad({y}, {x}, {g}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  Tensor dg = autograd::grad({sum(gi * w)}, {g})[0];
  Tensor yd = y.detach();
  EXPECT_TRUE(all_close(dg, yd * (w - sum(w * yd, {1}, true)), 1e-12, 1e-12));
}

}  // namespace
}  // namespace dp
