// Autograd of reductions: gradients by finite differences (gradcheck, float64), double backward,
// PyTorch's node names, the split of max/min/amax gradients among ties, and sum_to as the
// backward of broadcasting.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include "backend/cpu/reduce.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;
using test::gradcheck;
using test::rand_leaf;

::testing::AssertionResult check1(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  return gradcheck([f](const std::vector<Tensor>& xs) { return f(xs[0]); }, {x});
}

// Double backward: gradcheck of x -> d(f(x) . v)/dx taken with create_graph, so the backward
// formulas must themselves be differentiable. The finite-difference pass hands in plain copies of x
// (under no_grad), so the gradient is then taken w.r.t. a fresh leaf with grad mode on.
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

// A non-contiguous float64 leaf: the transpose of a fresh [cols, rows] tensor.
Tensor transposed_leaf(int64_t rows, int64_t cols) {
  Tensor base = rand({cols, rows}, kFloat64) * 2.0 - 1.0;
  return backend::restride_nograd(base.detach(), {rows, cols}, {1, rows}).requires_grad_(true);
}

TEST(ReductionGrad, Sum) {
  Tensor x = rand_leaf({2, 3, 4});
  EXPECT_TRUE(check1([](const Tensor& t) { return sum(t); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return sum(t, {1}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return sum(t, {0, 2}, true); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return sum(t, {-1}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return sum(t, {0}); }, transposed_leaf(3, 5)));
  EXPECT_TRUE(check1([](const Tensor& t) { return sum(t); }, rand_leaf({})));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return sum(t * t, {1}); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return sum(t.exp()); }, rand_leaf({3, 2})));
}

TEST(ReductionGrad, Mean) {
  Tensor x = rand_leaf({2, 3, 4});
  EXPECT_TRUE(check1([](const Tensor& t) { return mean(t); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return mean(t, {1, 2}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return mean(t, {0}, true); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return mean(t, {1}); }, transposed_leaf(4, 3)));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return mean(t * t, {-1}); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return mean(t.exp()); }, rand_leaf({3, 2})));
}

TEST(ReductionGrad, SumTo) {
  EXPECT_TRUE(check1([](const Tensor& t) { return sum_to(t, {4}); }, rand_leaf({3, 4})));
  EXPECT_TRUE(check1([](const Tensor& t) { return sum_to(t, {3, 1}); }, rand_leaf({2, 3, 4})));
  EXPECT_TRUE(check1([](const Tensor& t) { return sum_to(t, {}); }, rand_leaf({2, 3})));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return sum_to(t * t, {1, 4}); }, rand_leaf({3, 4})));
  // The gradient of a broadcast add, reduced back to each operand's shape.
  Tensor a = rand_leaf({4, 3}), b = rand_leaf({3});
  Tensor y = a + b;
  Tensor g = rand({4, 3}, kFloat64);
  auto grads = autograd::grad({y}, {a, b}, {g});
  EXPECT_TRUE(all_close(grads[0], g));
  EXPECT_TRUE(all_close(grads[1], sum(g, {0}), 1e-12, 1e-12));
}

TEST(ReductionGrad, MaxMinAlongDim) {
  Tensor x = rand_leaf({3, 5});
  EXPECT_TRUE(check1([](const Tensor& t) { return max(t, 1).first; }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return min(t, 0, true).first; }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return max(t, -1, true).first; }, transposed_leaf(4, 3)));
  EXPECT_TRUE(check1([](const Tensor& t) { return max(t, 0).first; }, rand_leaf({})));
  // Ties: the whole gradient goes to the first index, as PyTorch's CPU kernel picks it.
  Tensor y = tensor<double>({2, 5, 5, 1, 1, 0}, {2, 3}).requires_grad_(true);
  Tensor g = autograd::grad({max(y, 1).first}, {y}, {tensor<double>({10, 20})})[0];
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{0, 10, 0, 20, 0, 0}));
  g = autograd::grad({min(y, 1).first}, {y}, {tensor<double>({10, 20})})[0];
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{10, 0, 0, 0, 0, 20}));
}

TEST(ReductionGrad, MaxMinAllSplitEvenlyAmongTies) {
  EXPECT_TRUE(check1([](const Tensor& t) { return max(t); }, rand_leaf({3, 4})));
  EXPECT_TRUE(check1([](const Tensor& t) { return min(t); }, rand_leaf({3, 4})));
  Tensor y = tensor<double>({1, 4, 4, 0, 4, -2}, {2, 3}).requires_grad_(true);
  Tensor g = autograd::grad({max(y)}, {y}, {scalar_tensor(6.0, kFloat64)})[0];
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{0, 2, 2, 0, 2, 0}));
  g = autograd::grad({min(y)}, {y})[0];
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{0, 0, 0, 0, 0, 1}));
}

TEST(ReductionGrad, AmaxSplitsEvenlyPerSlice) {
  Tensor x = rand_leaf({3, 4, 2});
  EXPECT_TRUE(check1([](const Tensor& t) { return amax(t, {1}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return amax(t, {0, 2}, true); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return amax(t, {}); }, x));
  Tensor y = tensor<double>({3, 3, 1, 2, 5, 5, 5, 0}, {2, 4}).requires_grad_(true);
  Tensor g = autograd::grad({amax(y, {1})}, {y}, {tensor<double>({1, 3})})[0];
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{0.5, 0.5, 0, 0, 1, 1, 1, 0}));
}

TEST(ReductionGrad, VarStd) {
  Tensor x = rand_leaf({3, 4});
  EXPECT_TRUE(check1([](const Tensor& t) { return var(t, {}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return var(t, {1}, 0); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return var(t, {0}, 2, true); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return dp::std(t, {}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return dp::std(t, {-1}, 1, true); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return dp::std(t, {0}, 0); }, transposed_leaf(5, 3)));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return var(t, {1}); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return dp::std(t, {0}); }, x));
  // std of constant slices: the gradient is 0 there (not nan), as PyTorch.
  Tensor c = tensor<double>({2, 2, 2, 1, 2, 3}, {2, 3}).requires_grad_(true);
  Tensor g = autograd::grad({dp::std(c, {1})}, {c}, {tensor<double>({1, 1})})[0];
  std::vector<double> gv = g.to_vector<double>();
  for (int k = 0; k < 3; ++k) EXPECT_EQ(gv[k], 0.0);
  EXPECT_NEAR(gv[3], -0.5, 1e-12);
  EXPECT_NEAR(gv[5], 0.5, 1e-12);
}

TEST(ReductionGrad, Logsumexp) {
  Tensor x = rand_leaf({3, 4}, -3, 3);
  EXPECT_TRUE(check1([](const Tensor& t) { return logsumexp(t, {1}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return logsumexp(t, {0}, true); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return logsumexp(t, {}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return logsumexp(t, {1}); }, transposed_leaf(3, 5)));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return logsumexp(t, {1}); }, x));
  // Stable for large inputs: the gradient is the softmax.
  Tensor big = tensor<double>({1000, 1001, 999}).requires_grad_(true);
  Tensor g = autograd::grad({logsumexp(big, {0})}, {big})[0];
  EXPECT_TRUE(all_close(g, softmax(big.detach(), 0), 1e-12, 1e-12));
}

TEST(ReductionGrad, Norm) {
  Tensor x = rand_leaf({3, 4}, 0.2, 1.0) * tensor<double>({1, -1, 1, -1}).detach();
  x = x.detach().requires_grad_(true);
  for (double p : {2.0, 1.0, 3.0, 1.5, 0.5}) {
    SCOPED_TRACE(p);
    EXPECT_TRUE(check1([p](const Tensor& t) { return norm(t, p); }, x));
  }
  EXPECT_TRUE(check1([](const Tensor& t) { return norm(t, INFINITY); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return norm(t, -INFINITY); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return norm(t); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return norm(t, 3); }, x));
  // p = 0 has a zero gradient; a zero vector's 2-norm has gradient 0, not nan.
  Tensor g0 = autograd::grad({norm(x, 0)}, {x})[0];
  for (double v : g0.to_vector<double>()) EXPECT_EQ(v, 0.0);
  Tensor z = zeros({3}, kFloat64).requires_grad_(true);
  for (double v : autograd::grad({norm(z)}, {z})[0].to_vector<double>()) EXPECT_EQ(v, 0.0);
  // inf-norm: split among the elements of largest magnitude, with their signs.
  Tensor t = tensor<double>({3, -3, 1}).requires_grad_(true);
  EXPECT_EQ(autograd::grad({norm(t, INFINITY)}, {t})[0].to_vector<double>(), (std::vector<double>{0.5, -0.5, 0}));
}

TEST(ReductionGrad, NodeNamesAsPyTorch) {
  Tensor x = rand_leaf({3, 4});
  EXPECT_EQ(sum(x).grad_fn()->name(), "SumBackward0");
  EXPECT_EQ(sum(x, {0}).grad_fn()->name(), "SumBackward1");
  EXPECT_EQ(mean(x).grad_fn()->name(), "MeanBackward0");
  EXPECT_EQ(mean(x, {1}).grad_fn()->name(), "MeanBackward1");
  EXPECT_EQ(max(x).grad_fn()->name(), "MaxBackward1");
  EXPECT_EQ(max(x, 0).first.grad_fn()->name(), "MaxBackward0");
  EXPECT_EQ(min(x).grad_fn()->name(), "MinBackward1");
  EXPECT_EQ(min(x, 0).first.grad_fn()->name(), "MinBackward0");
  EXPECT_EQ(amax(x, {0}).grad_fn()->name(), "AmaxBackward0");
  EXPECT_EQ(var(x, {0}).grad_fn()->name(), "VarBackward0");
  EXPECT_EQ(dp::std(x, {0}).grad_fn()->name(), "StdBackward0");
  EXPECT_EQ(logsumexp(x, {0}).grad_fn()->name(), "LogsumexpBackward0");
  EXPECT_EQ(norm(x).grad_fn()->name(), "NormBackward1");
  EXPECT_EQ(softmax(x, 0).grad_fn()->name(), "SoftmaxBackward0");
  EXPECT_EQ(log_softmax(x, 0).grad_fn()->name(), "LogSoftmaxBackward0");
  // Indices and argmax carry no history.
  EXPECT_FALSE(max(x, 1).second.requires_grad());
  EXPECT_FALSE(argmax(x).requires_grad());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(sum(x).requires_grad());
    EXPECT_FALSE(softmax(x, 1).requires_grad());
  }
}

TEST(ReductionGrad, Float32GradientsHaveTheInputDtype) {
  Tensor x = rand({4, 5}).requires_grad_(true);
  for (auto f : std::vector<std::function<Tensor(const Tensor&)>>{
           [](const Tensor& t) { return sum(t, {1}); }, [](const Tensor& t) { return mean(t); }, [](const Tensor& t) { return var(t, {0}); },
           [](const Tensor& t) { return logsumexp(t, {1}); }, [](const Tensor& t) { return norm(t); }, [](const Tensor& t) { return amax(t, {1}); },
           [](const Tensor& t) { return softmax(t, 0); }, [](const Tensor& t) { return log_softmax(t, 1); }}) {
    Tensor y = f(x);
    Tensor g = autograd::grad({y}, {x}, {ones_like(y)})[0];
    EXPECT_EQ(g.dtype(), kFloat32);
    EXPECT_EQ(g.sizes(), x.sizes());
  }
}

}  // namespace
}  // namespace dp
