// dropout / dropout_: the fraction zeroed and the 1 / (1 - p) scaling, the gradient through the
// same mask, reproducibility with a seeded Generator, identity cases, p = 1, layouts, errors.
#include <gtest/gtest.h>
#include <cmath>
#include <string>
#include <vector>
#include "dp/ops/dropout.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;

// Fraction of exact zeros and whether every other element equals `kept`.
std::pair<double, bool> zero_fraction(const Tensor& y, double kept) {
  std::vector<double> v = y.to_vector<double>();
  int64_t zeros_n = 0;
  bool ok = true;
  for (double e : v) {
    if (e == 0.0)
      ++zeros_n;
    else
      ok = ok && e == kept;
  }
  return {static_cast<double>(zeros_n) / static_cast<double>(v.size()), ok};
}

TEST(Dropout, FractionZeroedAndScaling) {
  Tensor x = ones({1000, 1000});
  Generator gen(123);
  for (double p : {0.1, 0.5, 0.8}) {
    SCOPED_TRACE(p);
    Tensor y = dropout(x, p, true, &gen);
    auto [frac, scaled] = zero_fraction(y, static_cast<double>(static_cast<float>(1.0 / (1.0 - p))));
    // n = 1e6 draws: the standard deviation of the fraction is <= 5e-4.
    EXPECT_NEAR(frac, p, 3e-3);
    EXPECT_TRUE(scaled);
    // The mean is preserved in expectation.
    EXPECT_NEAR(mean(y).item<double>(), 1.0, 0.01);
  }
  // float64 too.
  Tensor yd = dropout(ones({200000}, kFloat64), 0.25, true, &gen);
  auto [frac, scaled] = zero_fraction(yd, 1.0 / 0.75);
  EXPECT_NEAR(frac, 0.25, 6e-3);
  EXPECT_TRUE(scaled);
}

TEST(Dropout, GradientUsesTheSameMask) {
  Generator gen(7);
  Tensor x = ones({50, 40}).requires_grad_(true);
  Tensor y = dropout(x, 0.3, true, &gen);
  ASSERT_TRUE(y.requires_grad());
  EXPECT_EQ(y.grad_fn()->name(), "NativeDropoutBackward0");
  Tensor g = rand({50, 40});
  y.backward(g);
  // y = mask * scale (x = 1), so the gradient is exactly g * y.
  EXPECT_TRUE(all_close(x.grad(), g * y.detach(), 0, 0));
  // create_graph: the same values, differentiable in the incoming gradient.
  Tensor x2 = rand({6, 7}, kFloat64).requires_grad_(true);
  Tensor y2 = dropout(x2, 0.4, true, &gen);
  Tensor g2 = rand({6, 7}, kFloat64).requires_grad_(true);
  Tensor plain = autograd::grad({y2}, {x2}, {g2}, /*retain_graph=*/true)[0];
  Tensor graph = autograd::grad({y2}, {x2}, {g2}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  EXPECT_TRUE(all_close(plain, graph.detach(), 0, 0));
  ASSERT_TRUE(graph.requires_grad());
  Tensor dg = autograd::grad({sum(graph)}, {g2})[0];
  EXPECT_TRUE(all_close(dg, y2.detach() / x2.detach(), 1e-12, 1e-12));  // mask * scale
}

// Finite differences: a freshly seeded generator per evaluation gives every evaluation the same
// mask, so the function is a fixed linear map whose Jacobian autograd must reproduce (and its
// backward's backward, in the incoming gradient).
TEST(Dropout, FiniteDifferenceGradients) {
  for (double p : {0.2, 0.5}) {
    SCOPED_TRACE(p);
    auto f = [p](const std::vector<Tensor>& in) {
      Generator gen(99);
      return dropout(in[0], p, true, &gen);
    };
    Tensor x = test::rand_leaf({5, 6});
    EXPECT_TRUE(test::gradcheck(f, {x}));
    EXPECT_TRUE(test::gradgradcheck(f, {x}));
    // The mask is not trivial: some elements dropped, some kept.
    Tensor y = f({x.detach()});
    const double zeros_n = sum(y.eq(0.0).to(kFloat64)).item<double>();
    EXPECT_GT(zeros_n, 0.0);
    EXPECT_LT(zeros_n, 30.0);
  }
}

TEST(Dropout, ReproducibleWithSeededGenerator) {
  Tensor x = rand({300, 301});
  Generator a(42), b(42), c(43);
  Tensor ya = dropout(x, 0.3, true, &a);
  Tensor yb = dropout(x, 0.3, true, &b);
  Tensor yc = dropout(x, 0.3, true, &c);
  EXPECT_TRUE(all_close(ya, yb, 0, 0));
  EXPECT_FALSE(all_close(ya, yc, 0, 0));
  // The stream advances: a second call draws a different mask.
  EXPECT_FALSE(all_close(dropout(x, 0.3, true, &a), ya, 0, 0));
  // The default generator, seeded by manual_seed.
  manual_seed(5);
  Tensor d1 = dropout(x, 0.5);
  manual_seed(5);
  Tensor d2 = dropout(x, 0.5);
  EXPECT_TRUE(all_close(d1, d2, 0, 0));
}

TEST(Dropout, MaskFollowsLogicalOrderWhateverTheLayout) {
  Tensor base = rand({20, 30});
  Tensor xt = base.t();
  ASSERT_FALSE(xt.is_contiguous());
  Generator a(9), b(9);
  EXPECT_TRUE(all_close(dropout(xt, 0.5, true, &a), dropout(xt.contiguous(), 0.5, true, &b), 0, 0));
}

TEST(Dropout, IdentityCases) {
  Tensor x = rand({4, 5}).requires_grad_(true);
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));  // eval
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));   // p = 0
  Tensor e = zeros({0, 3});
  EXPECT_TRUE(dropout(e, 0.5, true).is_same(e));
  // Identity cases draw nothing from the generator.
  Generator g(1);
  dropout(x, 0.5, false, &g);
  EXPECT_EQ(g.offset(), 0u);
}

TEST(Dropout, PEqualsOneGivesZeros) {
  Generator g(3);
  Tensor x = rand({8, 9}).requires_grad_(true);
  Tensor y = dropout(x, 1.0, true, &g);
  EXPECT_EQ(g.offset(), 0u);  // nothing drawn
  EXPECT_TRUE(all_close(y, zeros({8, 9}), 0, 0));
  sum(y).backward();
  EXPECT_TRUE(all_close(x.grad(), zeros({8, 9}), 0, 0));
  // input * 0, as PyTorch: NaN stays NaN.
  Tensor n = tensor<float>({NAN, 1.0f});
  std::vector<double> v = dropout(n, 1.0, true).to_vector<double>();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 0.0);
}

TEST(Dropout, HalfPrecision) {
  Generator g(11);
  Tensor y = dropout(ones({10000}, kFloat16), 0.5, true, &g);
  EXPECT_EQ(y.dtype(), kFloat16);
  auto [frac, scaled] = zero_fraction(y, 2.0);
  EXPECT_NEAR(frac, 0.5, 0.03);
  EXPECT_TRUE(scaled);
}

TEST(Dropout, InPlace) {
  Tensor x = rand({30, 40});
  Tensor y = x.clone();
  Generator a(21), b(21);
  Tensor expect = dropout(x, 0.4, true, &a);
  const uint32_t v0 = y.version();
  Tensor& r = dropout_(y, 0.4, true, &b);
  EXPECT_TRUE(r.is_same(y));
  EXPECT_GT(y.version(), v0);
  EXPECT_TRUE(all_close(y, expect, 0, 0));
  // On a leaf that requires grad: refused; on a non-leaf: the gradient goes through the mask.
  Tensor leaf = rand({5, 6}).requires_grad_(true);
  EXPECT_THROW(dropout_(leaf, 0.5, true), AutogradError);
  Tensor h = leaf * 1.0;
  Generator c(22);
  dropout_(h, 0.5, true, &c);
  sum(h).backward();
  EXPECT_TRUE(all_close(leaf.grad(), h.detach() / leaf.detach(), 1e-6, 1e-6));
  // Identity cases leave the tensor (and its version) alone.
  Tensor z = rand({3});
  const uint32_t vz = z.version();
  dropout_(z, 0.5, false);
  EXPECT_EQ(z.version(), vz);
}

TEST(Dropout, Errors) {
  Tensor x = rand({3});
  for (double p : {-0.1, 1.5}) {
    try {
      dropout(x, p, true);
      ADD_FAILURE() << "p = " << p << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("dropout probability has to be between 0 and 1, but got"), std::string::npos) << e.what();
    }
    EXPECT_THROW(dropout(x, p, false), ValueError);  // checked even in eval, as PyTorch
  }
  EXPECT_THROW(dropout(zeros({3}, kInt64), 0.5, true), DTypeError);
  EXPECT_THROW(dropout(Tensor(), 0.5, true), ValueError);
}

}  // namespace
}  // namespace dp
