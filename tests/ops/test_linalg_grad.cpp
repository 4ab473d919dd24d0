// Gradients of the matrix products by central finite differences (float64): every op, every
// matmul rank combination with batch broadcasting (summed back), strided operands, and double
// backward for mm, linear, matmul and addmm.
#include <gtest/gtest.h>

#include "support/gradcheck.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::gradcheck;
using test::rand_leaf;

using dp::test::gradgradcheck;

TEST(LinalgGrad, Mm) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return mm(x[0], x[1]); }, {rand_leaf({3, 4}), rand_leaf({4, 2})}));
  // transposed operands (views passed to BLAS through the trans flag)
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return mm(x[0].t(), x[1].t()); }, {rand_leaf({4, 3}), rand_leaf({2, 4})}));
  // only one side requires grad
  Tensor fixed = randn({4, 2}, kFloat64);
  EXPECT_TRUE(gradcheck([fixed](const std::vector<Tensor>& x) { return mm(x[0], fixed); }, {rand_leaf({3, 4})}));
}

TEST(LinalgGrad, MmDoubleBackward) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return mm(x[0], x[1]); }, {rand_leaf({3, 4}), rand_leaf({4, 2})}));
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& x) { return mm(x[0], x[1]); }, {rand_leaf({3, 4}), rand_leaf({4, 2})}));
  // a non-linear function of the product, so the second derivative is not trivially zero
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& x) {
        Tensor y = mm(x[0], x[1]);
        return mm(y, y.t());
      },
      {rand_leaf({2, 3}), rand_leaf({3, 2})}));
  EXPECT_TRUE(gradgradcheck(
      [](const std::vector<Tensor>& x) {
        Tensor y = mm(x[0], x[1]);
        return mm(y, y.t());
      },
      {rand_leaf({2, 3}), rand_leaf({3, 2})}));
}

TEST(LinalgGrad, Bmm) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return bmm(x[0], x[1]); }, {rand_leaf({2, 3, 4}), rand_leaf({2, 4, 2})}));
  auto bt = [](const std::vector<Tensor>& x) { return bmm(x[0], x[1].transpose(1, 2)); };
  EXPECT_TRUE(gradcheck(bt, {rand_leaf({2, 3, 4}), rand_leaf({2, 2, 4})}));
  EXPECT_TRUE(gradgradcheck(bt, {rand_leaf({2, 3, 4}), rand_leaf({2, 2, 4})}));
}

TEST(LinalgGrad, Addmm) {
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& x) { return addmm(x[0], x[1], x[2]); }, {rand_leaf({2}), rand_leaf({3, 4}), rand_leaf({4, 2})}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return addmm(x[0], x[1], x[2], 0.5, -2.0); },
                        {rand_leaf({3, 2}), rand_leaf({3, 4}), rand_leaf({4, 2})}));
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& x) { return addmm(x[0], x[1], x[2], 0.5, -2.0); },
                            {rand_leaf({3, 2}), rand_leaf({3, 4}), rand_leaf({4, 2})}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return addmm(x[0], x[1], x[2], 2, 3); },
                        {rand_leaf({3, 1}), rand_leaf({3, 4}), rand_leaf({4, 2})}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return addmm(x[0], x[1], x[2]); }, {rand_leaf({}), rand_leaf({3, 4}), rand_leaf({4, 2})}));
}

struct MatmulShapes {
  Shape a, b;
};

class MatmulGrad : public ::testing::TestWithParam<MatmulShapes> {};

TEST_P(MatmulGrad, MatchesFiniteDifferences) {
  const MatmulShapes& s = GetParam();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {rand_leaf(s.a), rand_leaf(s.b)}))
      << shape_str(s.a) << " @ " << shape_str(s.b);
}

INSTANTIATE_TEST_SUITE_P(EveryRankCombination, MatmulGrad,
                         ::testing::Values(MatmulShapes{{3}, {3}}, MatmulShapes{{2, 3}, {3}}, MatmulShapes{{3}, {3, 2}}, MatmulShapes{{2, 3}, {3, 2}},
                                           MatmulShapes{{2, 2, 3}, {3, 2}}, MatmulShapes{{2, 3}, {2, 3, 2}}, MatmulShapes{{2, 2, 3}, {3}},
                                           MatmulShapes{{3}, {2, 3, 2}}, MatmulShapes{{2, 2, 3}, {2, 3, 2}},
                                           MatmulShapes{{2, 1, 2, 3}, {3, 3, 2}},  // batch broadcast both ways
                                           MatmulShapes{{1, 2, 3}, {2, 3, 2}}, MatmulShapes{{2, 2, 2, 3}, {3}}, MatmulShapes{{3}, {2, 1, 3, 2}}));

TEST(LinalgGrad, MatmulStridedAndDoubleBackward) {
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0].transpose(0, 1), x[1].t()); }, {rand_leaf({3, 2, 4}), rand_leaf({2, 4})}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {rand_leaf({2, 1, 2, 3}), rand_leaf({2, 3, 2})}));
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {rand_leaf({2, 1, 2, 3}), rand_leaf({2, 3, 2})}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {rand_leaf({3}), rand_leaf({2, 3, 2})}));
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {rand_leaf({3}), rand_leaf({2, 3, 2})}));
}

TEST(LinalgGrad, Linear) {
  auto lin = [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); };
  EXPECT_TRUE(gradcheck(lin, {rand_leaf({3, 4}), rand_leaf({2, 4}), rand_leaf({2})}));
  EXPECT_TRUE(gradcheck(lin, {rand_leaf({2, 3, 4}), rand_leaf({2, 4}), rand_leaf({2})}));
  EXPECT_TRUE(gradcheck(lin, {rand_leaf({4}), rand_leaf({2, 4}), rand_leaf({2})}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1]); }, {rand_leaf({2, 1, 3}), rand_leaf({2, 3})}));
  // strided input: a transposed view goes through the copy path
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& x) { return linear(x[0].t(), x[1], x[2]); }, {rand_leaf({4, 3}), rand_leaf({2, 4}), rand_leaf({2})}));
}

TEST(LinalgGrad, LinearDoubleBackward) {
  auto lin = [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); };
  EXPECT_TRUE(gradcheck(lin, {rand_leaf({3, 4}), rand_leaf({2, 4}), rand_leaf({2})}));
  EXPECT_TRUE(gradgradcheck(lin, {rand_leaf({3, 4}), rand_leaf({2, 4}), rand_leaf({2})}));
  EXPECT_TRUE(gradcheck(lin, {rand_leaf({2, 2, 3}), rand_leaf({2, 3}), rand_leaf({2})}));
  EXPECT_TRUE(gradgradcheck(lin, {rand_leaf({2, 2, 3}), rand_leaf({2, 3}), rand_leaf({2})}));
  // two stacked layers: the second derivative mixes both weights
  auto two = [](const std::vector<Tensor>& x) { return linear(linear(x[0], x[1]), x[2]); };
  EXPECT_TRUE(gradcheck(two, {rand_leaf({2, 3}), rand_leaf({3, 3}), rand_leaf({2, 3})}));
  EXPECT_TRUE(gradgradcheck(two, {rand_leaf({2, 3}), rand_leaf({3, 3}), rand_leaf({2, 3})}));
}

TEST(LinalgGrad, DotAndOuter) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return dot(x[0], x[1]); }, {rand_leaf({5}), rand_leaf({5})}));
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& x) { return dot(x[0], x[1]); }, {rand_leaf({5}), rand_leaf({5})}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return dot(x[0].slice(0, std::nullopt, std::nullopt, 2), x[1]); },
                        {rand_leaf({6}), rand_leaf({3})}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return outer(x[0], x[1]); }, {rand_leaf({3}), rand_leaf({4})}));
  EXPECT_TRUE(gradgradcheck([](const std::vector<Tensor>& x) { return outer(x[0], x[1]); }, {rand_leaf({3}), rand_leaf({4})}));
}

TEST(LinalgGrad, OuterPromotedGradientKeepsInputDtype) {
  Tensor a = randn({3}).requires_grad_(), b = randn({2}, kFloat64).requires_grad_();
  Tensor y = outer(a, b);
  EXPECT_EQ(y.dtype(), kFloat64);
  y.sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat64);
  EXPECT_TRUE(test::all_close(a.grad(), b.sum().to(kFloat32).expand({3}), 1e-6, 1e-6));
}

TEST(LinalgGrad, EmptySizesBackward) {
  // k == 0: the product is zeros and the gradients are empty tensors of the inputs' shapes.
  Tensor a = zeros({3, 0}, kFloat64).requires_grad_(), b = zeros({0, 4}, kFloat64).requires_grad_();
  mm(a, b).sum().backward();
  EXPECT_EQ(a.grad().sizes(), (Shape{3, 0}));
  EXPECT_EQ(b.grad().sizes(), (Shape{0, 4}));
  Tensor x = zeros({2, 3, 0}, kFloat64).requires_grad_(), w = zeros({5, 0}, kFloat64).requires_grad_();
  Tensor bias = randn({5}, kFloat64).requires_grad_();
  Tensor y = linear(x, w, bias);
  EXPECT_TRUE(test::all_close(y, bias.detach().expand({2, 3, 5}), 0, 0));
  y.sum().backward();
  EXPECT_EQ(x.grad().sizes(), (Shape{2, 3, 0}));
  EXPECT_EQ(w.grad().sizes(), (Shape{5, 0}));
  EXPECT_TRUE(test::all_close(bias.grad(), full({5}, 6.0, kFloat64), 0, 0));
  Tensor p = zeros({2, 3, 0}, kFloat64).requires_grad_(), q = zeros({0, 4}, kFloat64).requires_grad_();
  matmul(p, q).sum().backward();
  EXPECT_EQ(q.grad().sizes(), (Shape{0, 4}));
  // zero rows
  Tensor r = zeros({0, 3}, kFloat64).requires_grad_(), s = randn({3, 2}, kFloat64).requires_grad_();
  mm(r, s).sum().backward();
  EXPECT_TRUE(test::all_close(s.grad(), zeros({3, 2}, kFloat64), 0, 0));
}

TEST(LinalgGrad, BroadcastBatchGradientIsSummed) {
  // a [1, 2, 3] broadcast against b [4, 3, 2]: a's gradient is the sum over the 4 batches.
  Tensor a = randn({1, 2, 3}, kFloat64).requires_grad_(), b = randn({4, 3, 2}, kFloat64).requires_grad_();
  matmul(a, b).sum().backward();
  EXPECT_EQ(a.grad().sizes(), (Shape{1, 2, 3}));
  Tensor expected = zeros({2, 3}, kFloat64);
  for (int64_t i = 0; i < 4; ++i) expected = expected + mm(ones({2, 2}, kFloat64), b.detach().select(0, i).t());
  EXPECT_TRUE(test::all_close(a.grad().squeeze(0), expected, 1e-12, 1e-12));
}

}  // namespace
}  // namespace dp
