// Loss gradients: finite-difference gradcheck (float64) of every loss w.r.t. input (and target
// where PyTorch differentiates it), in every reduction, with weights, ignore_index, label
// smoothing and N-d inputs; second derivatives through the create_graph backward; and the fused
// backward kernels against that dp-op formula (float32 and float64, shapes crossing the kernels'
// row and column-block paths).
#include <gtest/gtest.h>
#include <functional>
#include "dp/ops/loss.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;
using test::gradcheck;
using test::rand_leaf;

using LossFn = std::function<Tensor(const Tensor& x, const Tensor& t)>;

const Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

const char* rname(Reduction r) { return reduction_name(r); }

// Gradcheck of loss(x, t) w.r.t. x (and t when it requires grad).
::testing::AssertionResult check(const LossFn& f, const Tensor& x, const Tensor& t) {
  return gradcheck([f](const std::vector<Tensor>& xs) { return f(xs[0], xs[1]); }, {x, t});
}

// Second order: gradcheck of the first gradients (computed with create_graph) w.r.t. x, t (when
// it requires grad) and the incoming gradient v.
::testing::AssertionResult check_second_order(const LossFn& f, const Tensor& x, const Tensor& t) {
  const Shape out_shape = f(x.detach(), t.detach()).sizes();
  Tensor v = rand_leaf(out_shape, 0.5, 1.5);
  const bool with_t = t.requires_grad();
  test::TensorFn first = [f, with_t](const std::vector<Tensor>& xs) {
    AutoGradMode on(true);
    auto leaf = [](const Tensor& a) { return a.requires_grad() ? a : a.detach().requires_grad_(true); };
    Tensor xl = leaf(xs[0]);
    Tensor tl = with_t ? leaf(xs[1]) : xs[1];
    Tensor vl = leaf(xs[2]);
    Tensor out = f(xl, tl);
    std::vector<Tensor> wrt{xl};
    if (with_t) wrt.push_back(tl);
    std::vector<Tensor> g = autograd::grad({out}, wrt, {vl}, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
    std::vector<Tensor> flat;
    for (const Tensor& gi : g)
      if (gi.defined()) flat.push_back(gi.reshape({-1}));
    return cat(flat, 0);
  };
  return gradcheck(first, {x, t, v});
}

// The fused first-order backward against the create_graph (dp-op) formula.
void expect_fused_matches_composite(const LossFn& f, const Tensor& x0, const Tensor& t0, bool with_t, double rtol, double atol) {
  const Shape out_shape = f(x0, t0).sizes();
  const Tensor v = ones(out_shape, x0.dtype()) + rand(out_shape, x0.dtype());
  auto grads = [&](bool create_graph) {
    Tensor x = x0.detach().clone().requires_grad_(true);
    Tensor t = with_t ? t0.detach().clone().requires_grad_(true) : t0;
    Tensor out = f(x, t);
    std::vector<Tensor> wrt{x};
    if (with_t) wrt.push_back(t);
    return autograd::grad({out}, wrt, {v}, false, create_graph);
  };
  std::vector<Tensor> fused = grads(false), composite = grads(true);
  ASSERT_EQ(fused.size(), composite.size());
  for (size_t k = 0; k < fused.size(); ++k) EXPECT_TRUE(all_close(fused[k], composite[k].detach(), rtol, atol)) << "gradient " << k;
}

Tensor idx(std::vector<int64_t> v, Shape shape) { return tensor<int64_t>(v, shape); }

TEST(LossGrad, MseAndL1) {
  for (Reduction r : kReductions) {
    SCOPED_TRACE(rname(r));
    Tensor x = rand_leaf({3, 4}), t = rand_leaf({3, 4});
    EXPECT_TRUE(check([r](const Tensor& a, const Tensor& b) { return mse_loss(a, b, r); }, x, t));
    EXPECT_TRUE(check([r](const Tensor& a, const Tensor& b) { return l1_loss(a, b, r); }, x, t));
    EXPECT_TRUE(check_second_order([r](const Tensor& a, const Tensor& b) { return mse_loss(a, b, r); }, x, t));
    EXPECT_TRUE(check_second_order([r](const Tensor& a, const Tensor& b) { return l1_loss(a, b, r); }, x, t));
  }
  Tensor x0 = rand_leaf({}), t0 = rand_leaf({});
  EXPECT_TRUE(check([](const Tensor& a, const Tensor& b) { return mse_loss(a, b); }, x0, t0));
}

TEST(LossGrad, BinaryCrossEntropy) {
  Tensor w = rand({4}, kFloat64) + 0.5;
  for (Reduction r : kReductions) {
    SCOPED_TRACE(rname(r));
    Tensor x = rand_leaf({3, 4}, 0.05, 0.95), t = rand_leaf({3, 4}, 0.0, 1.0);
    LossFn plain = [r](const Tensor& a, const Tensor& b) { return binary_cross_entropy(a, b, {}, r); };
    LossFn weighted = [r, w](const Tensor& a, const Tensor& b) { return binary_cross_entropy(a, b, w, r); };
    EXPECT_TRUE(check(plain, x, t));
    EXPECT_TRUE(check(weighted, x, t));
    EXPECT_TRUE(check_second_order(weighted, x, t));
  }
}

TEST(LossGrad, BinaryCrossEntropyWithLogits) {
  Tensor w = rand({3, 1}, kFloat64) + 0.5;
  Tensor pw = rand({4}, kFloat64) * 3.0;
  for (Reduction r : kReductions) {
    SCOPED_TRACE(rname(r));
    Tensor x = rand_leaf({3, 4}, -4, 4), t = rand_leaf({3, 4}, 0.0, 1.0);
    LossFn plain = [r](const Tensor& a, const Tensor& b) { return binary_cross_entropy_with_logits(a, b, {}, {}, r); };
    LossFn both = [r, w, pw](const Tensor& a, const Tensor& b) { return binary_cross_entropy_with_logits(a, b, w, pw, r); };
    LossFn pos = [r, pw](const Tensor& a, const Tensor& b) { return binary_cross_entropy_with_logits(a, b, {}, pw, r); };
    EXPECT_TRUE(check(plain, x, t));
    EXPECT_TRUE(check(both, x, t));
    EXPECT_TRUE(check(pos, x, t));
    EXPECT_TRUE(check_second_order(both, x, t));
    EXPECT_TRUE(check_second_order(plain, x, t));
  }
}

TEST(LossGrad, NllLoss) {
  Tensor w = rand({4}, kFloat64) + 0.5;
  Tensor t2 = idx({0, 3, -100, 1, 2}, {5});
  Tensor t3 = idx({0, 1, 2, -100, 3, 3, 1, 0, 2, 1, -100, 0}, {2, 2, 3});
  Tensor t1 = idx({2}, {});
  for (Reduction r : kReductions) {
    SCOPED_TRACE(rname(r));
    LossFn f = [r, w](const Tensor& a, const Tensor& b) { return nll_loss(a, b, w, -100, r); };
    LossFn g = [r](const Tensor& a, const Tensor& b) { return nll_loss(a, b, {}, 1, r); };
    EXPECT_TRUE(check(f, rand_leaf({5, 4}), t2));
    EXPECT_TRUE(check(g, rand_leaf({5, 4}), t2.clamp(0)));
    EXPECT_TRUE(check(f, rand_leaf({2, 4, 2, 3}), t3));
    EXPECT_TRUE(check(f, rand_leaf({4}), t1));
    EXPECT_TRUE(check_second_order(f, rand_leaf({5, 4}), t2));
    EXPECT_TRUE(check_second_order(f, rand_leaf({2, 4, 2, 3}), t3));
  }
}

TEST(LossGrad, CrossEntropyClassIndices) {
  Tensor w = rand({4}, kFloat64) + 0.5;
  Tensor t2 = idx({0, 3, -100, 1, 2}, {5});
  Tensor t3 = idx({0, 1, 2, -100, 3, 3, 1, 0, 2, 1, -100, 0}, {2, 2, 3});
  for (Reduction r : kReductions) {
    for (double ls : {0.0, 0.2}) {
      SCOPED_TRACE(::testing::Message() << rname(r) << " label_smoothing " << ls);
      LossFn f = [r, ls](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, {}, -100, r, ls); };
      LossFn fw = [r, ls, w](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, w, -100, r, ls); };
      LossFn fi = [r, ls, w](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, w, 3, r, ls); };
      EXPECT_TRUE(check(f, rand_leaf({5, 4}, -3, 3), t2));
      EXPECT_TRUE(check(fw, rand_leaf({5, 4}, -3, 3), t2));
      EXPECT_TRUE(check(fi, rand_leaf({5, 4}, -3, 3), t2.clamp(0)));
      EXPECT_TRUE(check(fw, rand_leaf({2, 4, 2, 3}, -3, 3), t3));
      EXPECT_TRUE(check(fw, rand_leaf({4}, -3, 3), idx({1}, {})));
      EXPECT_TRUE(check_second_order(fw, rand_leaf({5, 4}, -3, 3), t2));
      EXPECT_TRUE(check_second_order(fw, rand_leaf({2, 4, 2, 3}, -3, 3), t3));
    }
  }
}

TEST(LossGrad, CrossEntropyClassProbabilities) {
  Tensor w = rand({3}, kFloat64) + 0.5;
  for (Reduction r : kReductions) {
    for (double ls : {0.0, 0.3}) {
      SCOPED_TRACE(::testing::Message() << rname(r) << " label_smoothing " << ls);
      LossFn f = [r, ls](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, {}, -100, r, ls); };
      LossFn fw = [r, ls, w](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, w, -100, r, ls); };
      EXPECT_TRUE(check(f, rand_leaf({4, 3}, -3, 3), rand_leaf({4, 3}, 0, 1)));
      EXPECT_TRUE(check(fw, rand_leaf({4, 3}, -3, 3), rand_leaf({4, 3}, 0, 1)));
      EXPECT_TRUE(check(fw, rand_leaf({2, 3, 5}, -3, 3), rand_leaf({2, 3, 5}, 0, 1)));
      EXPECT_TRUE(check(fw, rand_leaf({3}, -3, 3), rand_leaf({3}, 0, 1)));
      EXPECT_TRUE(check_second_order(fw, rand_leaf({4, 3}, -3, 3), rand_leaf({4, 3}, 0, 1)));
      EXPECT_TRUE(check_second_order(fw, rand_leaf({2, 3, 5}, -3, 3), rand_leaf({2, 3, 5}, 0, 1)));
    }
  }
}

TEST(LossGrad, FusedBackwardMatchesComposite) {
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double rtol = dt == kFloat32 ? 1e-5 : 1e-12, atol = dt == kFloat32 ? 1e-6 : 1e-14;
    for (Reduction r : kReductions) {
      SCOPED_TRACE(rname(r));
      Tensor x = randn({64, 37}, dt), t = randn({64, 37}, dt);
      Tensor p = rand({64, 37}, dt) * 0.9 + 0.05, q = rand({64, 37}, dt);
      Tensor w = rand({37}, dt) + 0.5, wcol = rand({64, 1}, dt) + 0.5;
      expect_fused_matches_composite([r](const Tensor& a, const Tensor& b) { return mse_loss(a, b, r); }, x, t, true, rtol, atol);
      expect_fused_matches_composite([r](const Tensor& a, const Tensor& b) { return l1_loss(a, b, r); }, x, t, true, rtol, atol);
      expect_fused_matches_composite([r, w](const Tensor& a, const Tensor& b) { return binary_cross_entropy(a, b, w, r); }, p, q, true, rtol * 10,
                                     atol);
      expect_fused_matches_composite([r, wcol, w](const Tensor& a, const Tensor& b) { return binary_cross_entropy_with_logits(a, b, wcol, w, r); },
                                     x * 4.0, q, true, rtol * 10, atol);
      Tensor ti = randint(0, 37, {64});
      ti.data_ptr<int64_t>()[5] = -100;
      Tensor ti3 = randint(0, 5, {3, 300});
      ti3.data_ptr<int64_t>()[7] = -100;
      Tensor x3 = randn({3, 5, 300}, dt) * 3.0;
      Tensor w5 = rand({5}, dt) + 0.5;
      expect_fused_matches_composite([r, w](const Tensor& a, const Tensor& b) { return nll_loss(a, b, w, -100, r); }, x, ti, false, rtol, atol);
      expect_fused_matches_composite([r, w](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, w, -100, r, 0.1); }, x * 3.0, ti, false,
                                     rtol * 10, atol);
      expect_fused_matches_composite([r](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, {}, -100, r, 0.0); }, x * 3.0, ti, false,
                                     rtol * 10, atol);
      expect_fused_matches_composite([r, w5](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, w5, -100, r, 0.2); }, x3, ti3, false,
                                     rtol * 10, atol);
      expect_fused_matches_composite([r, w5](const Tensor& a, const Tensor& b) { return nll_loss(a, b, w5, -100, r); }, x3, ti3, false, rtol, atol);
      Tensor q3 = rand({3, 5, 300}, dt);
      expect_fused_matches_composite([r, w](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, w, -100, r, 0.1); }, x * 3.0, q, true,
                                     rtol * 10, atol);
      expect_fused_matches_composite([r, w5](const Tensor& a, const Tensor& b) { return cross_entropy(a, b, w5, -100, r, 0.1); }, x3, q3, true,
                                     rtol * 10, atol);
    }
  }
}

}  // namespace
}  // namespace dp
