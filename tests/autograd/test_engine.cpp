// The backward engine on graphs that run in the calling thread (host tensors): gradient flow
// through chains, diamonds and several roots, autograd::grad() and its filters, retain_graph and
// create_graph, hooks, retain_grad, detach, errors and their messages, and AccumulateGrad's rules.
// The ops used are the hand-written ones of engine_test_ops.h, so every expected value follows from
// the chain rule alone.
#include <gtest/gtest.h>
#include <atomic>
#include <cmath>
#include "autograd/engine_test_ops.h"

namespace dp::agtest {
namespace {

// A chain multiplies the local derivatives: d(3 * (2x))/dx = 6 for every element.
TEST(EngineBasics, ChainMultipliesDerivatives) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = tsum(tscale(tscale(x, 2), 3));
  EXPECT_FLOAT_EQ(value(y), 36);
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{6, 6, 6}));
  EXPECT_FALSE(x.grad().requires_grad());
}

// A diamond (x feeds two branches that meet again) sums the branches' gradients: 2 + 3 = 5.
TEST(EngineBasics, DiamondSumsBranches) {
  Tensor x = leaf({1, -1});
  Tensor y = tsum(tadd(tscale(x, 2), tscale(x, 3)));
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{5, 5}));
}

// x used twice by one node (x * x): both edges lead to the same leaf, gradient 2x.
TEST(EngineBasics, SameInputTwiceInOneNode) {
  Tensor x = leaf({1.5f, -2, 4});
  tsum(tmul(x, x)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{3, -4, 8}));
}

// A wide diamond whose middle nodes all feed one node's single input: the buffer sums 8 deliveries.
TEST(EngineBasics, ManyDeliveriesIntoOneBuffer) {
  Tensor x = leaf({1});
  Tensor a = tscale(x, 1);
  Tensor acc = tscale(a, 1);
  for (int i = 2; i <= 8; ++i) acc = tadd(acc, tscale(a, static_cast<float>(i)));
  tsum(acc).backward();
  EXPECT_FLOAT_EQ(value(x.grad()), 36);  // 1 + 2 + ... + 8
}

// Several roots: their gradients add up in the shared leaf; each root's own gradient is used.
TEST(EngineBasics, MultipleRoots) {
  Tensor x = leaf({1, 2});
  Tensor y1 = tscale(x, 2);
  Tensor y2 = tsum(tscale(x, 5));
  autograd::backward({y1, y2}, {vec({1, 10}), Tensor()});
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2 + 5, 20 + 5}));
}

// A root listed twice counts twice; a root that is also reachable from another root gets its own
// seed plus what flows into it.
TEST(EngineBasics, RepeatedAndNestedRoots) {
  Tensor x = leaf({1});
  Tensor a = tscale(x, 2);
  autograd::backward({a, a}, {vec({1}), vec({1})});
  EXPECT_FLOAT_EQ(value(x.grad()), 4);

  Tensor z = leaf({1});
  Tensor b = tscale(z, 3);
  Tensor c = tscale(b, 7);
  autograd::backward({c, b}, {vec({1}), vec({1})});  // dc/dz = 21, db/dz = 3
  EXPECT_FLOAT_EQ(value(z.grad()), 24);
}

// Leaf gradients accumulate across backward calls (until the user zeroes them).
TEST(EngineBasics, LeafGradAccumulatesAcrossCalls) {
  Tensor x = leaf({1, 2});
  tsum(tscale(x, 2)).backward();
  tsum(tscale(x, 3)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{5, 5}));
  Tensor g = x.grad();
  tsum(tscale(x, 1)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{6, 6}));
  EXPECT_EQ(values(g), (std::vector<float>{6, 6}));  // accumulated in place, as in PyTorch
}

// A scalar leaf can be a root itself: its gradient is 1.
TEST(EngineBasics, LeafAsRoot) {
  Tensor x = leaf({3}, Device::cpu(), /*scalar=*/true);
  x.backward();
  EXPECT_FLOAT_EQ(value(x.grad()), 1);
}

TEST(EngineErrors, RootWithoutGradOrNonScalar) {
  Tensor x = vec({1, 2});
  try {
    x.backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), ("element 0 of tensors does not require grad and does not have a grad_fn"));
  }
  Tensor y = tscale(leaf({1, 2}), 2);
  try {
    y.backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), ("grad can be implicitly created only for scalar outputs"));
  }
  EXPECT_THROW(y.backward(vec({1, 2, 3})), ShapeError);
}

// An exception thrown in a node reaches the caller with its type and message; the graph's other
// nodes do not run afterwards, and the engine is usable again.
TEST(EngineErrors, ExceptionInNodeIsRethrown) {
  Tensor x = leaf({1});
  Tensor y = tsum(tprobe(tscale(x, 2), [] { throw ValueError("boom in probe"); }));
  try {
    y.backward();
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "boom in probe");
  }
  EXPECT_FALSE(x.grad().defined());
  tsum(tscale(x, 2)).backward();
  EXPECT_FLOAT_EQ(value(x.grad()), 2);
}

// A backward function that returns the wrong number of gradients, or a gradient of the wrong
// shape, is reported with the node's name (PyTorch's validate_outputs wording).
TEST(EngineErrors, InvalidGradientsAreReported) {
  Tensor x = leaf({1, 2});
  Tensor out = vec({3, 4});
  autograd::record("TwoForOneBackward", {x}, {out}, [](variable_list&& g) { return variable_list{g[0], g[0]}; });
  try {
    tsum(out).backward();
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), ("function TwoForOneBackward returned an incorrect number of gradients (expected 1, got 2)"));
  }
  Tensor out2 = vec({3, 4});
  autograd::record("BadShapeBackward", {x}, {out2}, [](variable_list&&) { return variable_list{vec({1, 2, 3})}; });
  try {
    tsum(out2).backward();
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), ("Function BadShapeBackward returned an invalid gradient at index 0 - got [3] but expected shape compatible with [2]"));
  }
}

// Without retain_graph the graph's saved state is freed: a second backward fails with PyTorch's
// message; with retain_graph=true the second pass works and accumulates again.
TEST(EngineRetainGraph, SecondBackwardNeedsRetainGraph) {
  Tensor x = leaf({1, 2});
  Tensor y = tsum(tmul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4, 8}));
  try {
    y.backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), ("Trying to backward through the graph a second time (or directly access saved tensors after they "
                          "have already been freed). Saved intermediate values of the graph are freed when you call "
                          ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                          "graph a second time or if you need to access saved tensors after calling backward."));
  }
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4, 8}));
}

// grad() also frees the graph unless retain_graph.
TEST(EngineRetainGraph, GradFreesGraphToo) {
  Tensor x = leaf({2});
  Tensor y = tsum(tmul(x, x));
  EXPECT_FLOAT_EQ(value(autograd::grad({y}, {x})[0]), 4);
  EXPECT_THROW(autograd::grad({y}, {x}), AutogradError);
}

// grad() returns d(outputs)/d(inputs) and leaves .grad alone; it works for non-leaf inputs too.
TEST(EngineGrad, ReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = leaf({1, 2});
  Tensor w = leaf({3, 4});
  Tensor h = tmul(x, w);
  Tensor y = tsum(tscale(h, 2));
  std::vector<Tensor> g = autograd::grad({y}, {x, w, h}, {}, /*retain_graph=*/true);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(values(g[0]), (std::vector<float>{6, 8}));
  EXPECT_EQ(values(g[1]), (std::vector<float>{2, 4}));
  EXPECT_EQ(values(g[2]), (std::vector<float>{2, 2}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  // With an explicit gradient for a non-scalar output.
  std::vector<Tensor> g2 = autograd::grad({h}, {x}, {vec({1, -1})});
  EXPECT_EQ(values(g2[0]), (std::vector<float>{3, -4}));
}

// The "needed" filter: grad() runs only the nodes on a path to a requested input.
TEST(EngineGrad, RunsOnlyNodesLeadingToInputs) {
  Tensor x = leaf({1});
  Tensor w = leaf({5});
  std::atomic<int> side_runs{0}, main_runs{0};
  Tensor a = tprobe(tscale(x, 2), [&] { ++main_runs; });
  Tensor b = tprobe(tscale(w, 3), [&] { ++side_runs; });
  Tensor y = tsum(tadd(a, b));
  std::vector<Tensor> g = autograd::grad({y}, {x});
  EXPECT_FLOAT_EQ(value(g[0]), 2);
  EXPECT_EQ(main_runs.load(), 1);
  EXPECT_EQ(side_runs.load(), 0);
  EXPECT_FALSE(w.grad().defined());
}

// Unused inputs: an error naming the input unless allow_unused, which gives undefined tensors.
TEST(EngineGrad, AllowUnused) {
  Tensor x = leaf({1});
  Tensor unused = leaf({2});
  Tensor y = tsum(tscale(x, 4));
  try {
    autograd::grad({y}, {x, unused}, {}, /*retain_graph=*/true);
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), ("One of the differentiated Tensors (input 1) appears to not have been used in the graph. Set "
                          "allow_unused=True if this is the desired behavior."));
  }
  std::vector<Tensor> g = autograd::grad({y}, {x, unused}, {}, false, false, /*allow_unused=*/true);
  EXPECT_FLOAT_EQ(value(g[0]), 4);
  EXPECT_FALSE(g[1].defined());
  // A leaf that was used in some other graph (it has an AccumulateGrad) is still unused here.
  Tensor other = tsum(tscale(unused, 1));
  Tensor y2 = tsum(tscale(x, 1));
  std::vector<Tensor> g2 = autograd::grad({y2}, {unused}, {}, false, false, true);
  EXPECT_FALSE(g2[0].defined());
}

TEST(EngineGrad, InputMustRequireGrad) {
  Tensor x = leaf({1});
  Tensor c = vec({1});
  Tensor y = tsum(tscale(x, 4));
  EXPECT_THROW(autograd::grad({y}, {c}), AutogradError);
}

// grad() of an output w.r.t. itself is the seed; the leaf's own tensor hooks run on a captured leaf
// gradient (as PyTorch's capture path), but nothing is accumulated.
TEST(EngineGrad, CapturesAtRootsAndRunsLeafHooks) {
  Tensor x = leaf({2});
  Tensor y = tscale(x, 3);
  std::vector<Tensor> g = autograd::grad({y}, {y}, {vec({7})}, true);
  EXPECT_FLOAT_EQ(value(g[0]), 7);
  x.register_hook([](const Tensor& grad) { return tscale(grad, 10); });
  std::vector<Tensor> gx = autograd::grad({y}, {x}, {vec({1})});
  EXPECT_FLOAT_EQ(value(gx[0]), 30);
  EXPECT_FALSE(x.grad().defined());
}

// Double backward: with create_graph the gradient has history, so d²(x³)/dx² = 6x.
TEST(EngineCreateGraph, SecondDerivativeOfCube) {
  Tensor x = leaf({1, 2, -3});
  Tensor y = tsum(tmul(tmul(x, x), x));
  std::vector<Tensor> g = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true);
  EXPECT_EQ(values(g[0]), (std::vector<float>{3, 12, 27}));  // 3x²
  ASSERT_TRUE(g[0].requires_grad());
  std::vector<Tensor> gg = autograd::grad({tsum(g[0])}, {x});
  EXPECT_EQ(values(gg[0]), (std::vector<float>{6, 12, -18}));  // 6x
}

// backward(create_graph=true) leaves a .grad with history; backward through it gives the second
// derivative accumulated into the same .grad (PyTorch: x.grad = 3x² + 6x).
TEST(EngineCreateGraph, BackwardWithCreateGraphKeepsHistoryInGrad) {
  Tensor x = leaf({2});
  Tensor y = tsum(tmul(tmul(x, x), x));
  y.backward(Tensor(), false, /*create_graph=*/true);
  Tensor g = x.grad();
  EXPECT_FLOAT_EQ(value(g), 12);
  ASSERT_TRUE(g.requires_grad());
  tsum(g).backward();
  EXPECT_FLOAT_EQ(value(x.grad()), 12 + 12);
  // As in PyTorch, .grad with history and the graph (whose AccumulateGrad holds x) form a cycle:
  // resetting .grad breaks it (LeakSanitizer checks that nothing else is left behind).
  x.set_grad(Tensor());
  g = Tensor();
}

// A saved output gets its history back under create_graph: d²/dx² exp(x) = exp(x). (Were the saved
// output used without history, the second derivative would miss this term and be 0.)
TEST(EngineCreateGraph, SavedOutputIsDifferentiable) {
  Tensor x = leaf({0.5f, -1});
  Tensor y = tsum(texp(x));
  std::vector<Tensor> g = autograd::grad({y}, {x}, {}, false, true);
  std::vector<Tensor> gg = autograd::grad({tsum(g[0])}, {x});
  EXPECT_NEAR(values(gg[0])[0], std::exp(0.5f), 1e-6);
  EXPECT_NEAR(values(gg[0])[1], std::exp(-1.0f), 1e-6);
}

// Each node runs with grad mode = create_graph, whatever the caller's mode (and the caller's mode
// is restored afterwards).
TEST(EngineGradMode, NodesRunWithCreateGraphMode) {
  Tensor x = leaf({1});
  std::vector<int> seen;
  auto probe = [&] { seen.push_back(GradMode::is_enabled() ? 1 : 0); };
  Tensor y = tsum(tprobe(x, probe));
  y.backward(Tensor(), /*retain_graph=*/true);  // caller: grad mode on, nodes: off
  {
    NoGradGuard no_grad;
    y.backward(Tensor(), true, /*create_graph=*/true);  // caller: off, nodes: on
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_EQ(seen, (std::vector<int>{0, 1}));
}

// Grad mode is per thread: a NoGradGuard here does not stop another thread from recording.
TEST(EngineGradMode, NoGradGuardIsThreadLocal) {
  Tensor x = leaf({1});
  NoGradGuard no_grad;
  EXPECT_FALSE(tscale(x, 2).requires_grad());
  bool other_records = false, other_enabled = false;
  std::thread t([&] {
    other_enabled = GradMode::is_enabled();
    other_records = tscale(x, 2).requires_grad();
  });
  t.join();
  EXPECT_TRUE(other_enabled);
  EXPECT_TRUE(other_records);
  EXPECT_FALSE(GradMode::is_enabled());
}

// An in-place change of a saved input after the forward is reported with PyTorch's wording,
// naming the tensor's producer.
TEST(EngineSavedVariable, ModifiedInputMessage) {
  Tensor x = leaf({1, 2, 3});
  Tensor h = tscale(x, 2, "MulBackward1");
  Tensor w = leaf({1, 1, 1});
  Tensor y = tsum(tmul(h, w));
  h.bump_version();  // what an in-place op on h does
  try {
    y.backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), ("one of the variables needed for gradient computation has been modified by an inplace operation: "
                          "[torch.FloatTensor [3]], which is output 0 of MulBackward1, is at version 1; expected "
                          "version 0 instead."));
  }
}

// The same for a saved output: it names the node it was saved for.
TEST(EngineSavedVariable, ModifiedOutputMessage) {
  Tensor x = leaf({0, 1});
  Tensor e = texp(x);
  Tensor y = tsum(e);
  e.bump_version();
  try {
    y.backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& err) {
    EXPECT_HAS(err.what(), ("[torch.FloatTensor [2]], which is output 0 of ExpBackward0, is at version 1; expected version 0 instead."));
  }
  // A saved leaf (no producer) gives the message without "which is".
  Tensor a = vec({1, 2});
  Tensor b = leaf({3, 4});
  Tensor z = tsum(tmul(a, b));
  a.bump_version();
  try {
    z.backward();
    FAIL();
  } catch (const AutogradError& err) {
    EXPECT_HAS(err.what(), ("inplace operation: [torch.FloatTensor [2]] is at version 1; expected version 0 instead."));
  }
}

// Hooks on a non-leaf see its gradient and may replace it; removing one stops it.
TEST(EngineHooks, NonLeafHookReplacesGradient) {
  Tensor x = leaf({1, 2});
  Tensor h = tscale(x, 2);
  std::vector<float> seen;
  int id = h.register_hook([&](const Tensor& g) {
    seen = values(g);
    return tscale(g, 10);
  });
  Tensor y = tsum(tscale(h, 3));
  y.backward(Tensor(), true);
  EXPECT_EQ(seen, (std::vector<float>{3, 3}));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{60, 60}));
  h.remove_hook(id);
  x.mutable_grad() = Tensor();
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{6, 6}));
}

// Hooks on a leaf run before accumulation (a replacement is what lands in .grad); a hook that
// returns nothing keeps the gradient.
TEST(EngineHooks, LeafHooksRunInOrder) {
  Tensor x = leaf({1});
  std::vector<int> order;
  x.register_hook([&](const Tensor& g) {
    order.push_back(1);
    return tscale(g, 2);
  });
  int id2 = x.register_hook([&](const Tensor& g) {
    order.push_back(2);
    EXPECT_FLOAT_EQ(value(g), 6);  // sees the first hook's replacement
    return Tensor();
  });
  tsum(tscale(x, 3)).backward();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_FLOAT_EQ(value(x.grad()), 6);
  x.remove_hook(id2);
  tsum(tscale(x, 3)).backward();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 1}));
  EXPECT_FLOAT_EQ(value(x.grad()), 12);
}

// Post-accumulate-grad hooks (DDP's "gradient ready" signal) run once per backward, after .grad
// holds the new sum, and get the leaf itself.
TEST(EngineHooks, PostAccumulateGradHook) {
  Tensor x = leaf({1, 1});
  std::vector<std::vector<float>> seen;
  x.register_post_accumulate_grad_hook([&](Tensor& t) {
    EXPECT_TRUE(t.is_same(x));
    seen.push_back(values(t.grad()));
  });
  Tensor h = tscale(x, 2);
  tsum(tadd(h, tscale(x, 3))).backward();  // two paths into x: still one accumulation
  tsum(tscale(x, 1)).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<float>{5, 5}));
  EXPECT_EQ(seen[1], (std::vector<float>{6, 6}));
  Tensor y = tscale(leaf({1}), 2);
  EXPECT_THROW(y.register_post_accumulate_grad_hook([](Tensor&) {}), AutogradError);
}

// Handles are per tensor: two outputs of one node may hold the same handle number, and removing
// one tensor's hook leaves the other's in place.
TEST(EngineHooks, HandlesOfTwoOutputsOfOneNode) {
  Tensor x = leaf({1});
  Tensor o0 = vec({1}), o1 = vec({1});
  autograd::record("SplitBackward", {x}, {o0, o1}, [](variable_list&& g) { return variable_list{tadd(g[0], g[1])}; });
  int calls0 = 0, calls1 = 0;
  int h0 = o0.register_hook([&](const Tensor&) {
    ++calls0;
    return Tensor();
  });
  int h1 = o1.register_hook([&](const Tensor&) {
    ++calls1;
    return Tensor();
  });
  EXPECT_EQ(h0, h1);  // both tensors' first handle
  o0.remove_hook(h0);
  Tensor y = tsum(tadd(o0, o1));
  y.backward();
  EXPECT_EQ(calls0, 0);
  EXPECT_EQ(calls1, 1);
  EXPECT_FLOAT_EQ(value(x.grad()), 2);
}

// A multi-output node whose second output is unused gets zeros for it (materialize_grads).
TEST(EngineBasics, MissingOutputGradientIsZeros) {
  Tensor x = leaf({1, 2});
  Tensor o0 = vec({1, 2}), o1 = vec({3, 4});
  std::vector<float> second;
  autograd::record("TwoOutputsBackward", {x}, {o0, o1}, [&](variable_list&& g) {
    second = values(g[1]);
    return variable_list{tadd(g[0], g[1])};
  });
  tsum(tscale(o0, 2)).backward();
  EXPECT_EQ(second, (std::vector<float>{0, 0}));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2, 2}));
}

// retain_grad keeps a non-leaf's gradient in .grad, accumulating across passes; it sees the
// gradient after the tensor's other hooks, even ones registered later (as PyTorch 2).
TEST(EngineRetainGrad, NonLeafGradIsKept) {
  Tensor x = leaf({1, 2});
  Tensor h = tscale(x, 2);
  h.retain_grad();
  EXPECT_TRUE(h.retains_grad());
  h.register_hook([](const Tensor& g) { return tscale(g, 10); });
  Tensor y = tsum(tscale(h, 3));
  y.backward(Tensor(), true);
  EXPECT_EQ(values(h.grad()), (std::vector<float>{30, 30}));
  y.backward();
  EXPECT_EQ(values(h.grad()), (std::vector<float>{60, 60}));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{120, 120}));
  Tensor c = vec({1});
  EXPECT_THROW(c.retain_grad(), AutogradError);
}

// retain_grad on a root: .grad is the seed.
TEST(EngineRetainGrad, OnRoot) {
  Tensor x = leaf({2});
  Tensor y = tsum(tscale(x, 3));
  y.retain_grad();
  y.backward();
  EXPECT_FLOAT_EQ(value(y.grad()), 1);
}

// detach() shares memory and the version counter but has no history; detach_() turns a non-leaf
// into a leaf, cutting the graph there.
TEST(EngineDetach, DetachAndDetachInPlace) {
  Tensor x = leaf({1, 2});
  Tensor h = tscale(x, 2);
  Tensor d = h.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.data_ptr(), h.data_ptr());
  d.bump_version();
  EXPECT_EQ(h.version(), 1u);

  Tensor y = tsum(tadd(tscale(x, 3), tmul(d, x)));  // d is a constant: dy/dx = 3 + d
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{5, 7}));

  Tensor k = tscale(x, 5);
  k.detach_();
  EXPECT_TRUE(k.is_leaf());
  EXPECT_FALSE(k.requires_grad());
  EXPECT_EQ(k.grad_fn(), nullptr);
}

// AccumulateGrad never lets .grad alias another tensor: a caller's gradient is copied...
TEST(EngineAccumulateGrad, CopiesWhatOthersCanSee) {
  Tensor x = leaf({1, 2});
  Tensor g = vec({5, 6});
  x.backward(g);
  EXPECT_NE(x.grad().data_ptr(), g.data_ptr());
  g.data_ptr<float>()[0] = 100;
  EXPECT_EQ(values(x.grad()), (std::vector<float>{5, 6}));

  // ... so is a gradient a hook keeps a handle to ...
  Tensor w = leaf({1});
  Tensor kept;
  w.register_hook([&](const Tensor& grad) {
    kept = tscale(grad, 1);
    return kept;
  });
  tsum(tscale(w, 2)).backward();
  EXPECT_NE(w.grad().data_ptr(), kept.data_ptr());
  EXPECT_FLOAT_EQ(value(w.grad()), 2);

  // ... and one gradient delivered to two leaves (AddBackward returns the same tensor twice).
  Tensor a = leaf({1, 1}), b = leaf({2, 2});
  Tensor s = tadd(a, b);
  s.backward(vec({3, 4}));
  EXPECT_NE(a.grad().data_ptr(), b.grad().data_ptr());
  a.grad().data_ptr<float>()[0] = -1;
  EXPECT_EQ(values(b.grad()), (std::vector<float>{3, 4}));
}

// ... while a gradient nothing else can see is stolen (no copy).
TEST(EngineAccumulateGrad, StealsSoleGradient) {
  Tensor x = leaf({1, 2});
  Tensor out = vec({0, 0});
  const void* made = nullptr;
  autograd::record("MakeGradBackward", {x}, {out}, [&](variable_list&&) {
    Tensor g = vec({7, 8});
    made = g.data_ptr();
    return variable_list{g};
  });
  out.backward(vec({1, 1}));
  EXPECT_EQ(x.grad().data_ptr(), made);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{7, 8}));
}

// With create_graph the first gradient is cloned with history rather than stored as is.
TEST(EngineAccumulateGrad, CreateGraphCopies) {
  Tensor x = leaf({1});
  Tensor g = vec({4});
  Tensor y = tscale(x, 1);
  y.backward(g, false, true);
  EXPECT_NE(x.grad().data_ptr(), g.data_ptr());
  EXPECT_FLOAT_EQ(value(x.grad()), 4);
}

// A leaf that gets no gradient (its path returned none) keeps .grad undefined (PyTorch: None).
TEST(EngineAccumulateGrad, UndefinedGradientLeavesGradUndefined) {
  Tensor x = leaf({1});
  Tensor w = leaf({2});
  Tensor out = vec({3});
  autograd::record("OnlyFirstBackward", {x, w}, {out}, [](variable_list&& g) { return variable_list{g[0], Tensor()}; });
  out.backward(vec({1}));
  EXPECT_FLOAT_EQ(value(x.grad()), 1);
  EXPECT_FALSE(w.grad().defined());
}

// check_inplace: an in-place op on a leaf that requires grad is refused (PyTorch's message) while
// grad mode is on; allowed under no_grad and on tensors that do not require grad.
TEST(EngineInplace, LeafRequiringGradIsRefused) {
  Tensor x = leaf({1});
  try {
    autograd::check_inplace(x, "add_");
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), "add_: a leaf Variable that requires grad is being used in an in-place operation.");
  }
  {
    NoGradGuard no_grad;
    EXPECT_NO_THROW(autograd::check_inplace(x, "add_"));
  }
  EXPECT_NO_THROW(autograd::check_inplace(vec({1}), "add_"));
  EXPECT_NO_THROW(autograd::check_inplace(tscale(x, 2), "add_"));  // a non-leaf may be changed
}

// An in-place op rebases the tensor's history onto its node (rebase_history); retain_grad follows
// the tensor, so .grad is the gradient of its new value.
TEST(EngineInplace, RebaseHistoryMovesRetainGrad) {
  Tensor x = leaf({1, 2});
  Tensor h = tscale(x, 2);
  h.retain_grad();
  // h.mul_(3), written out: values changed in place, version bumped, a node whose edge leads to
  // h's previous history, and h rebased onto it.
  autograd::Edge old_edge = autograd::gradient_edge(h);
  for (float* p = h.data_ptr<float>(); p != h.data_ptr<float>() + 2; ++p) *p *= 3;
  h.bump_version();
  auto node = std::make_shared<autograd::FunctionNode>("MulBackward1", [](variable_list&& g) { return variable_list{tscale(g[0], 3)}; });
  node->add_next_edge(old_edge);
  autograd::rebase_history(h, node);
  EXPECT_EQ(h.grad_fn()->name(), "MulBackward1");
  EXPECT_EQ(values(h), (std::vector<float>{6, 12}));
  tsum(tscale(h, 5)).backward();
  EXPECT_EQ(values(h.grad()), (std::vector<float>{5, 5}));  // d/d(new h), not 15 (d/d(old h))
  EXPECT_EQ(values(x.grad()), (std::vector<float>{30, 30}));
}

// The engine converts a gradient of another dtype to the input's, and rejects one on another
// device, naming the node.
TEST(EngineErrors, GradientDtypeConvertedDeviceChecked) {
  Tensor x = leaf({1, 2});
  Tensor out = vec({0, 0});
  autograd::record("Float64Backward", {x}, {out}, [](variable_list&&) {
    Tensor g = make_empty({2}, kFloat64, Device::cpu());
    g.data_ptr<double>()[0] = 0.5;
    g.data_ptr<double>()[1] = 1.5;
    return variable_list{g};
  });
  out.backward(vec({1, 1}));
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{0.5f, 1.5f}));

  ensure_cpu_devices(2);
  Tensor out2 = vec({0, 0});
  autograd::record("WrongDeviceBackward", {x}, {out2}, [](variable_list&&) { return variable_list{vec({1, 1}, Device::cpu(1))}; });
  try {
    out2.backward(vec({1, 1}));
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), "Function WrongDeviceBackward returned an invalid gradient at index 0 - expected device cpu but got cpu:1");
  }
}

// While a node's backward runs, current_node() is that node (SavedVariable relies on it).
TEST(EngineBasics, CurrentNodeDuringApply) {
  Tensor x = leaf({1});
  const autograd::Node* seen = nullptr;
  Tensor y = tprobe(
      x, [&] { seen = autograd::current_node(); }, "SeeMeBackward");
  const autograd::Node* expected = y.grad_fn().get();
  tsum(y).backward();
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(autograd::current_node(), nullptr);
}

// The same second derivatives through the library's own ops (dp::pow, dp::exp, dp::sigmoid): their
// backward formulas are recorded under create_graph, and exp/sigmoid use their saved outputs.
TEST(EngineRealOps, SecondDerivativesWithDpOps) {
  Tensor x = dp::tensor({1.0, 2.0, -3.0}).requires_grad_();
  std::vector<Tensor> g = autograd::grad({dp::sum(dp::pow(x, 3))}, {x}, {}, false, true);
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{3, 12, 27}));
  EXPECT_EQ(autograd::grad({dp::sum(g[0])}, {x})[0].to_vector<float>(), (std::vector<float>{6, 12, -18}));

  Tensor e = dp::tensor({0.5}).requires_grad_();
  std::vector<Tensor> ge = autograd::grad({dp::sum(dp::exp(e))}, {e}, {}, false, true);
  EXPECT_NEAR(autograd::grad({dp::sum(ge[0])}, {e})[0].item<double>(), std::exp(0.5), 1e-6);

  Tensor s = dp::tensor({0.3}).requires_grad_();
  std::vector<Tensor> gs = autograd::grad({dp::sum(dp::sigmoid(s))}, {s}, {}, false, true);
  const double sg = 1 / (1 + std::exp(-0.3));
  EXPECT_NEAR(autograd::grad({dp::sum(gs[0])}, {s})[0].item<double>(), sg * (1 - sg) * (1 - 2 * sg), 1e-6);
}

}  // namespace
}  // namespace dp::agtest
