#pragma once
// The tests' gradient checks: dp::autograd::gradcheck / gradgradcheck (dp/autograd/gradcheck.h)
// as gtest assertions (EXPECT_TRUE(gradcheck(f, inputs)) prints the mismatch), with this suite's
// tighter default rtol (1e-4; PyTorch's is 1e-3). Full Jacobians: keep inputs small.
#include <gtest/gtest.h>
#include <functional>
#include <vector>
#include "dp/autograd/gradcheck.h"
#include "dp/dp.h"

namespace dp::test {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-4;
  // Also check the graph is differentiable again (double backward): gradcheck of
  // x -> sum of the squared gradients d(f(x) . v)/dx, with a fixed random v.
  bool check_grad_grad = false;
};

// `inputs` should be float64; the ones with requires_grad() are checked. The function may return a
// tensor of any shape.
::testing::AssertionResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

// Double backward, as torch.autograd.gradgradcheck, with the incoming gradient v drawn by
// rand_leaf (uniform in [-1, 1)) from the default generator.
::testing::AssertionResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs);

// Random float64 leaf of the given shape in [lo, hi), requiring grad.
Tensor rand_leaf(IntArrayRef shape, double lo = -1.0, double hi = 1.0);

}  // namespace dp::test
