// Autograd of views and shape ops: gradients by finite differences (gradcheck), double backward,
// node names as PyTorch's, views marked as views, multi-output nodes with unused outputs.
#include <gtest/gtest.h>
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::gradcheck;
using test::rand_leaf;

// gradcheck of a one-input function.
::testing::AssertionResult check1(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  return gradcheck([f](const std::vector<Tensor>& xs) { return f(xs[0]); }, {x});
}

// Double backward: gradcheck of x -> d(f(x) . v)/dx, computed with create_graph (the Jacobian of a
// gradient, so the backward formulas must themselves be differentiable). The finite-difference
// pass hands in plain copies of x (and runs under no_grad), so the gradient is taken w.r.t. a fresh
// leaf there with grad mode on.
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

TEST(ShapeGrad, ViewReshapeFlatten) {
  Tensor x = rand_leaf({2, 3, 4});
  EXPECT_TRUE(check1([](const Tensor& t) { return t.view({6, 4}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.view({-1}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.reshape({4, 6}); }, x));
  // reshape of a non-contiguous input copies (CloneBackward0 + UnsafeViewBackward0).
  EXPECT_TRUE(check1([](const Tensor& t) { return t.transpose(0, 2).reshape({24}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.flatten(); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.flatten(1); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.transpose(0, 1).flatten(1); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.unflatten(2, {2, 2}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.view({3, 8}).unflatten(0, {-1, 1}); }, x));
}

TEST(ShapeGrad, NarrowSliceSelect) {
  Tensor x = rand_leaf({3, 5});
  EXPECT_TRUE(check1([](const Tensor& t) { return t.narrow(1, 1, 3); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.narrow(-2, -2, 2); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.slice(1, 0, std::nullopt, 2); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.slice(0, -2, 100); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.select(1, -1); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.select(0, 1); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.t().select(0, 2); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t[2].slice(0, 1, 4, 2); }, x));
}

TEST(ShapeGrad, TransposePermuteSqueezeUnsqueeze) {
  Tensor x = rand_leaf({2, 1, 3});
  EXPECT_TRUE(check1([](const Tensor& t) { return t.transpose(0, 2); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.permute({2, 0, 1}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.squeeze(); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.squeeze(1); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.squeeze(0); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.unsqueeze(-1); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.unsqueeze(0).transpose(0, 3); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.t(); }, rand_leaf({3, 4})));
}

TEST(ShapeGrad, Expand) {
  EXPECT_TRUE(check1([](const Tensor& t) { return t.expand({3, 4}); }, rand_leaf({3, 1})));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.expand({2, 3, 4}); }, rand_leaf({4})));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.expand({2, -1, 4}); }, rand_leaf({1, 3, 1})));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.expand({5}); }, rand_leaf({})));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.expand_as(zeros({2, 3}, kFloat64)); }, rand_leaf({2, 1})));
}

TEST(ShapeGrad, AsStrided) {
  Tensor x = rand_leaf({4, 3});
  EXPECT_TRUE(check1([](const Tensor& t) { return t.as_strided({2, 2}, {3, 1}, 1); }, x));
  // Overlapping output windows: gradients add up where windows share elements.
  EXPECT_TRUE(check1([](const Tensor& t) { return t.as_strided({4, 3}, {1, 2}); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.as_strided({3, 3}, {2, 1}, 0); }, x));
  // Of a non-contiguous (but non-overlapping) input: the geometry is taken in storage positions.
  EXPECT_TRUE(check1([](const Tensor& t) { return t.t().as_strided({2, 3}, {1, 3}, 3); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.narrow(0, 1, 2).as_strided({2, 2}, {1, 1}); }, x));
  // Of an overlapping (expanded) input: as PyTorch, the gradient is divided among the elements
  // sharing a position, so the base's gradient (after ExpandBackward) is right.
  // (The output must stay inside the input's positions, here column 0: 0, 3, 6, 9.)
  EXPECT_TRUE(check1([](const Tensor& t) { return t.select(1, 0).expand({3, 4}).as_strided({4}, {3}, 0); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.select(1, 0).expand({2, 4}).as_strided({2, 2}, {3, 3}, 0); }, x));
}

TEST(ShapeGrad, ChunkSplitWithUnusedPieces) {
  Tensor x = rand_leaf({5, 4});
  // Only one piece reaches the output: the engine materialises zeros for the others.
  EXPECT_TRUE(check1([](const Tensor& t) { return t.chunk(3, 0)[1]; }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.chunk(2, -1)[0]; }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.split(2, 0)[2]; }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.split_with_sizes({1, 0, 3}, 1)[2]; }, x));
  // All pieces used, recombined in another order.
  EXPECT_TRUE(check1(
      [](const Tensor& t) {
        auto p = t.split(2, 0);
        return cat({p[2], p[0], p[1]}, 0);
      },
      x));
  // Only the gradient of the used piece is non-zero.
  Tensor y = x.chunk(2, 0)[1];
  ASSERT_EQ(y.sizes(), (Shape{2, 4}));
  autograd::backward({y}, {ones({2, 4}, kFloat64)});
  std::vector<double> g = x.grad().to_vector<double>();
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(g[i], i >= 12 ? 1.0 : 0.0) << i;
}

TEST(ShapeGrad, CatStack) {
  Tensor a = rand_leaf({2, 3}), b = rand_leaf({1, 3}), c = rand_leaf({2, 2});
  test::TensorFn f = [](const std::vector<Tensor>& xs) { return cat({xs[0], xs[1]}, 0); };
  EXPECT_TRUE(gradcheck(f, {a, b}));
  f = [](const std::vector<Tensor>& xs) { return cat({xs[0], xs[1], xs[0]}, -1); };
  EXPECT_TRUE(gradcheck(f, {a, c}));
  // A skipped [0] tensor and an input without grad.
  f = [](const std::vector<Tensor>& xs) { return cat({zeros({0}, kFloat64), xs[0], ones({2, 3}, kFloat64)}, 0); };
  EXPECT_TRUE(gradcheck(f, {a}));
  f = [](const std::vector<Tensor>& xs) { return stack({xs[0], xs[1]}, 1); };
  EXPECT_TRUE(gradcheck(f, {a, rand_leaf({2, 3})}));
  f = [](const std::vector<Tensor>& xs) { return stack({xs[0], xs[0].t().t()}, -1); };
  EXPECT_TRUE(gradcheck(f, {a}));
}

TEST(ShapeGrad, CatPromotionGradientHasInputDtype) {
  Tensor a = ones({2}, TensorOptions(kFloat32).requires_grad());
  Tensor b = ones({3}, TensorOptions(kFloat64).requires_grad());
  Tensor i = tensor<int32_t>({7});
  Tensor y = cat({a, i, b});
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_EQ(y.grad_fn()->name(), "CatBackward0");
  autograd::backward({y}, {arange(6, kFloat64)});
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat64);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{3, 4, 5}));
  // Only skipped [0] tensors: an empty result that still has history.
  Tensor e = zeros({0}, TensorOptions(kFloat64).requires_grad());
  Tensor ce = cat({e, e});
  EXPECT_EQ(ce.sizes(), (Shape{0}));
  EXPECT_EQ(ce.grad_fn()->name(), "CatBackward0");
  autograd::backward({ce}, {zeros({0}, kFloat64)});
  EXPECT_EQ(e.grad().sizes(), (Shape{0}));
  Tensor s = stack({ones({2}, TensorOptions(kFloat32).requires_grad()), ones({2}, kFloat64)});
  EXPECT_EQ(s.dtype(), kFloat64);
  EXPECT_EQ(s.grad_fn()->name(), "StackBackward0");
}

TEST(ShapeGrad, CloneContiguousIdentity) {
  Tensor x = rand_leaf({3, 4});
  EXPECT_TRUE(check1([](const Tensor& t) { return t.clone(); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return t.t().contiguous(); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return contiguous(t.t()); }, x));
}

TEST(ShapeGrad, ToDeviceAndDtype) {
  if (cpu_device_count() < 2) set_cpu_device_count(2);
  Tensor x = rand_leaf({2, 3});
  // Host -> cpu:1 -> host (the gradient goes back across both copies).
  EXPECT_TRUE(check1([](const Tensor& t) { return t.to(Device("cpu:1")).narrow(1, 1, 2).to(Device::cpu()); }, x));
  EXPECT_TRUE(check1([](const Tensor& t) { return to(t, Device("cpu:0"), kFloat64, false, true).to(Device::cpu()); }, x));
  // dtype round trip: the gradient comes back as float64.
  Tensor y = x.to(kFloat32);
  EXPECT_EQ(y.grad_fn()->name(), "ToCopyBackward0");
  autograd::backward({y}, {full({2, 3}, 0.5, kFloat32)});
  EXPECT_EQ(x.grad().dtype(), kFloat64);
  EXPECT_EQ(x.grad().device(), Device::cpu());
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(6, 0.5));
  // Across devices: the gradient lands on the source device.
  Tensor z = rand_leaf({3});
  Tensor w = z.to(Device("cpu:1"), kFloat32);
  EXPECT_EQ(w.device(), Device("cpu:1"));
  autograd::backward({w}, {ones({3}, TensorOptions(kFloat32).device(Device("cpu:1")))});
  EXPECT_EQ(z.grad().device(), Device::cpu());
  EXPECT_EQ(z.grad().dtype(), kFloat64);
  // To an integer dtype: not differentiable.
  EXPECT_FALSE(x.to(kInt64).requires_grad());
}

TEST(ShapeGrad, NodeNamesAsPyTorch) {
  Tensor x = rand_leaf({2, 3});
  auto name = [](const Tensor& t) { return t.grad_fn() ? t.grad_fn()->name() : std::string("<leaf>"); };
  EXPECT_EQ(name(x.view({3, 2})), "ViewBackward0");
  EXPECT_EQ(name(x.reshape({3, 2})), "ReshapeAliasBackward0");  // PyTorch 1.13's reshape of a viewable input
  EXPECT_EQ(name(x.t().reshape({6})), "UnsafeViewBackward0");
  EXPECT_EQ(x.t().reshape({6}).grad_fn()->next_edges()[0].function->name(), "CloneBackward0");
  EXPECT_EQ(name(x.flatten()), "ReshapeAliasBackward0");
  EXPECT_EQ(name(x.unflatten(1, {3, 1})), "ViewBackward0");
  EXPECT_EQ(name(x.narrow(0, 0, 1)), "SliceBackward0");
  EXPECT_EQ(name(x.slice(1, 1)), "SliceBackward0");
  EXPECT_EQ(name(x.select(0, 1)), "SelectBackward0");
  EXPECT_EQ(name(x.transpose(0, 1)), "TransposeBackward0");
  EXPECT_EQ(name(x.permute({1, 0})), "PermuteBackward0");
  EXPECT_EQ(name(x.expand({2, 2, 3})), "ExpandBackward0");
  EXPECT_EQ(name(x.squeeze()), "SqueezeBackward0");
  EXPECT_EQ(name(x.squeeze(0)), "SqueezeBackward1");
  EXPECT_EQ(name(x.unsqueeze(0)), "UnsqueezeBackward0");
  EXPECT_EQ(name(x.as_strided({2}, {1})), "AsStridedBackward0");
  EXPECT_EQ(name(x.chunk(2, 1)[0]), "SplitBackward0");
  EXPECT_EQ(name(x.split(1, 0)[1]), "SplitBackward0");
  EXPECT_EQ(name(x.split_with_sizes({1, 2}, 1)[1]), "SplitWithSizesBackward0");
  EXPECT_EQ(name(zeros({0}, TensorOptions(kFloat64).requires_grad()).chunk(2)[0]), "SplitWithSizesBackward0");
  EXPECT_EQ(name(cat({x, x})), "CatBackward0");
  EXPECT_EQ(name(stack({x, x})), "StackBackward0");
  EXPECT_EQ(name(x.clone()), "CloneBackward0");
  EXPECT_EQ(name(x.t().contiguous()), "CloneBackward0");
  EXPECT_EQ(name(x.to(kFloat32)), "ToCopyBackward0");
  // One node for all pieces of a split.
  auto pieces = x.chunk(3, 1);
  EXPECT_EQ(pieces[0].grad_fn().get(), pieces[2].grad_fn().get());
  EXPECT_EQ(pieces[2].output_nr(), 2u);
}

TEST(ShapeGrad, ViewsAreMarkedAndCopiesAreNot) {
  Tensor x = rand_leaf({2, 3});
  auto is_view = [](const Tensor& t) { return t.unsafe_impl()->autograd && t.unsafe_impl()->autograd->is_view; };
  for (const Tensor& v : {x.view({6}), x.reshape({3, 2}), x.narrow(1, 0, 2), x.slice(0, 1), x.select(0, 0), x.transpose(0, 1), x.permute({1, 0}),
                          x.expand({4, 2, 3}), x.squeeze(), x.squeeze(0), x.unsqueeze(1), x.flatten(), x.unflatten(1, {3, 1}), x.as_strided({3}, {2}),
                          x.chunk(2, 1)[1], x.split(1)[0], x.split_with_sizes({2, 1}, 1)[0]})
    EXPECT_TRUE(is_view(v)) << v.grad_fn()->name();
  for (const Tensor& c : {x.clone(), x.t().contiguous(), cat({x, x}), stack({x}), x.to(kFloat32), x.t().reshape({6})})
    EXPECT_FALSE(is_view(c)) << c.grad_fn()->name();
  // Without history a view is not marked (nothing to protect).
  Tensor plain = zeros({2, 3});
  EXPECT_FALSE(is_view(plain.view({6})));
  EXPECT_FALSE(plain.view({6}).requires_grad());
}

// The backward of each linear view op is itself differentiable: d/dv of (J^T v) applied to w is J w.
TEST(ShapeGrad, BackwardOfBackwardIsTheViewAgain) {
  struct Case {
    const char* name;
    Shape in;
    std::function<Tensor(const Tensor&)> op;
  };
  const std::vector<Case> cases = {
      {"slice", {3, 4}, [](const Tensor& t) { return t.slice(1, 1, std::nullopt, 2); }},
      {"narrow", {3, 4}, [](const Tensor& t) { return t.narrow(0, 1, 2); }},
      {"select", {3, 4}, [](const Tensor& t) { return t.select(1, 2); }},
      {"as_strided",
       {3, 4},
       [](const Tensor& t) {
         return t.as_strided({3, 3}, {1, 2}, 1);
       }},
      {"as_strided_of_expand",
       {3},
       [](const Tensor& t) {
         return t.expand({2, 3}).as_strided({2, 2}, {1, 1});
       }},
      {"view",
       {3, 4},
       [](const Tensor& t) {
         return t.view({2, 6});
       }},
      {"transpose", {3, 4}, [](const Tensor& t) { return t.t(); }},
      {"permute",
       {2, 3, 2},
       [](const Tensor& t) {
         return t.permute({2, 0, 1});
       }},
      {"expand",
       {3, 1},
       [](const Tensor& t) {
         return t.expand({2, 3, 4});
       }},
      {"chunk", {4, 3}, [](const Tensor& t) { return t.chunk(2, 0)[1]; }},
      {"split_with_sizes",
       {4, 3},
       [](const Tensor& t) {
         return t.split_with_sizes({1, 2}, 1)[1];
       }},
      {"squeeze", {3, 1}, [](const Tensor& t) { return t.squeeze(); }},
      {"unsqueeze", {3}, [](const Tensor& t) { return t.unsqueeze(0); }},
      {"cat",
       {2, 3},
       [](const Tensor& t) {
         return cat({t, t.narrow(0, 0, 1)}, 0);
       }},
      {"stack",
       {2, 3},
       [](const Tensor& t) {
         return stack({t, t}, 1);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = rand_leaf(c.in);
    Tensor y = c.op(x);
    Tensor v = rand_leaf(y.sizes());
    std::vector<Tensor> g = autograd::grad({y}, {x}, {v}, /*retain_graph=*/true, /*create_graph=*/true);
    ASSERT_TRUE(g[0].requires_grad());
    Tensor w = rand(x.sizes(), kFloat64);
    std::vector<Tensor> gv = autograd::grad({g[0]}, {v}, {w});
    // gv = J w = op(w) for a linear op.
    Tensor expected = c.op(w);
    EXPECT_TRUE(test::all_close(gv[0], expected, 1e-12, 1e-12));
  }
}

TEST(ShapeGrad, DoubleBackwardThroughNonlinearComposition) {
  Tensor x = rand_leaf({3, 4});
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return t.narrow(1, 1, 2) * t.slice(1, 0, 2); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return t.select(0, 1) * t.select(0, 2); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return t.t().reshape({12}) * t.view({12}); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return t.permute({1, 0}) * t.t().contiguous(); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return t.narrow(0, 0, 1).expand({2, 4}) * t.narrow(0, 1, 2); }, x));
  EXPECT_TRUE(check_grad_grad(
      [](const Tensor& t) {
        auto p = t.chunk(2, 1);
        return cat({p[1] * p[0], p[0]}, 0);
      },
      x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return stack({t.select(1, 0), t.select(1, 3)}, 0) * t.narrow(1, 1, 2).t(); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return t.as_strided({2, 3}, {2, 1}, 1) * t.as_strided({2, 3}, {1, 2}); }, x));
  EXPECT_TRUE(check_grad_grad([](const Tensor& t) { return t.to(kFloat64, false, true).unsqueeze(0).squeeze(0) * t.flatten().view({3, 4}); }, x));
}

}  // namespace
}  // namespace dp
