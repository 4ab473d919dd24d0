#pragma once
// Compares autograd's gradients with central finite differences, in float64, element by element
// (the full Jacobian, so keep inputs small: tens of elements).
#include <gtest/gtest.h>
#include <functional>
#include <vector>
#include "dp/dp.h"

namespace dp::test {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-4;
  // Also check the graph is differentiable again (double backward) with the same method.
  bool check_grad_grad = false;
};

// `inputs` should be float64; the ones with requires_grad() are checked. The function may return a
// tensor of any shape.
::testing::AssertionResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

// Double backward, as torch.autograd.gradgradcheck: finite differences of
// (x..., v) -> d(f(x) . v)/dx with respect to the inputs and to the incoming gradient v, so every
// backward formula's own backward is exercised (for ops linear in x the Jacobian w.r.t. v is the
// non-trivial part).
::testing::AssertionResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs);

// Random float64 leaf of the given shape in [lo, hi), requiring grad.
Tensor rand_leaf(IntArrayRef shape, double lo = -1.0, double hi = 1.0);

}  // namespace dp::test
