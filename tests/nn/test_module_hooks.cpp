// Module hooks (dp/nn/hooks.h): forward pre-hooks, forward hooks, full backward hooks and their
// pre-hooks, with PyTorch's order, replacement, removal and error behaviour. The full backward
// hook's grad_input / grad_output are compared with PyTorch 1.13 (tests/golden/gen_module_hooks.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>
#include "dp/autograd/gradcheck.h"
#include "dp/nn/nn.h"
#include "support/golden.h"
#include "support/golden_linear.h"

namespace dp::nn {
namespace {

using test::load_linear;
using test::matrix;

using test::all_close;
using test::golden_file;
using test::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const json& golden() { return golden_file("module_hooks.json"); }

// The golden module: forward(x, y, z) = (fc(x) * y, fc(x).sum()); z is not used.
struct PairImpl : Module {
  Linear fc{nullptr};
  PairImpl() {
    fc = register_module("fc", Linear(3, 2));
    load_linear(fc, golden());
  }
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& y, const Tensor& z) {
    Tensor h = fc(x);
    return {h * y, h.sum()};
  }
};
using Pair = ModuleHolder<PairImpl>;

Tensor tensor_from_json_scaled(const json& j, double scale) { return test::tensor_from_json(j) * scale; }

Linear small_linear() {
  manual_seed(7);
  return Linear(3, 2);
}

// A gradient is undefined exactly where PyTorch's is None, else equal to it.
::testing::AssertionResult matches(const Tensor& actual, const json& expected) {
  if (expected.is_null()) {
    if (!actual.defined()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "expected no gradient (None), got a tensor of shape " << actual.size_str();
  }
  if (!actual.defined()) return ::testing::AssertionFailure() << "expected a gradient, got an undefined tensor";
  return all_close(actual, expected);
}

TEST(ModuleHooks, RunInRegistrationOrderAroundForward) {
  Linear fc = small_linear();
  std::vector<std::string> log;
  fc->register_forward_pre_hook([&](Module& m, const TensorList& in) {
    EXPECT_EQ(&m, fc.get());
    EXPECT_EQ(in.size(), 1u);
    log.push_back("pre1");
  });
  fc->register_forward_hook([&](Module&, const TensorList&, const Tensor&) { log.push_back("fwd1"); });
  fc->register_forward_pre_hook([&](Module&, const TensorList&) { log.push_back("pre2"); });
  fc->register_forward_hook([&](Module&, const TensorList& in, const TensorList& out) {
    EXPECT_EQ(in.size(), 1u);
    EXPECT_EQ(out.size(), 1u);
    log.push_back("fwd2");
  });
  Tensor x = randn({4, 3});
  Tensor y = fc(x);
  EXPECT_THAT(log, ElementsAre("pre1", "pre2", "fwd1", "fwd2"));
  EXPECT_TRUE(equal(y, fc->forward(x)));
}

TEST(ModuleHooks, PreHookReplacesInputsAndForwardHookReplacesOutput) {
  Linear fc = small_linear();
  Tensor x = randn({4, 3});
  fc->register_forward_pre_hook([](Module&, const TensorList& in) -> std::optional<TensorList> { return TensorList{in[0] * 2.0}; });
  // The second pre-hook sees the first one's replacement.
  Tensor seen;
  fc->register_forward_pre_hook([&](Module&, const TensorList& in) { seen = in[0]; });
  fc->register_forward_hook([](Module&, const TensorList&, const Tensor& out) { return out + 1.0; });
  fc->register_forward_hook([](Module&, const TensorList&, const Tensor& out) -> std::optional<Tensor> { return out * 3.0; });
  Tensor y = fc(x);
  EXPECT_TRUE(allclose(seen, x * 2.0));
  EXPECT_TRUE(allclose(y, (fc->forward(x * 2.0) + 1.0) * 3.0));
}

TEST(ModuleHooks, ForwardHookSeesAndReplacesEveryOutputTensor) {
  Pair m;
  Tensor x = randn({4, 3}), y = randn({4, 2}), z = randn({4, 3});
  m->register_forward_hook([](Module&, const TensorList& in, const TensorList& out) -> std::optional<TensorList> {
    EXPECT_EQ(in.size(), 3u);
    EXPECT_EQ(out.size(), 2u);
    return TensorList{out[0], out[1] * 0.0};
  });
  auto [a, b] = m(x, y, z);
  auto [a0, b0] = m->forward(x, y, z);
  EXPECT_TRUE(equal(a, a0));
  EXPECT_EQ(b.item<float>(), 0.0f);
}

// Tensors inside containers are found and replaced in order; other arguments are not hook inputs.
struct WeightedSumImpl : Module {
  std::pair<Tensor, std::optional<Tensor>> forward(const std::vector<Tensor>& xs, double scale, const std::optional<Tensor>& extra) {
    Tensor s = xs[0] * scale;
    for (size_t i = 1; i < xs.size(); ++i) s = s + xs[i] * scale;
    return {s, extra};
  }
};

TEST(ModuleHooks, TensorsInsideContainersAreHookInputsAndOutputs) {
  ModuleHolder<WeightedSumImpl> m;
  Tensor a = ones({2}), b = ones({2}) * 2.0, c = ones({2}) * 5.0;
  m->register_forward_pre_hook([](Module&, const TensorList& in) -> std::optional<TensorList> {
    EXPECT_EQ(in.size(), 3u);  // xs[0], xs[1], *extra; not the double
    return TensorList{in[0], in[1] * 10.0, in[2]};
  });
  size_t outputs = 0;
  m->register_forward_hook([&](Module&, const TensorList&, const TensorList& out) { outputs = out.size(); });
  auto [s, extra] = m(std::vector<Tensor>{a, b}, 3.0, std::optional<Tensor>(c));
  EXPECT_TRUE(allclose(s, ones({2}) * 63.0));  // (1 + 20) * 3
  ASSERT_TRUE(extra.has_value());
  EXPECT_TRUE(equal(*extra, c));
  EXPECT_EQ(outputs, 2u);
  // An empty optional holds no tensor: the output list has only the sum.
  m(std::vector<Tensor>{a, b, c}, 1.0, std::optional<Tensor>());
  EXPECT_EQ(outputs, 1u);
}

TEST(ModuleHooks, CallingForwardDirectlyBypassesHooks) {
  Linear fc = small_linear();
  int calls = 0;
  fc->register_forward_hook([&](Module&, const TensorList&, const Tensor&) { ++calls; });
  fc->forward(randn({2, 3}));
  EXPECT_EQ(calls, 0);
  fc(randn({2, 3}));
  call(*fc, randn({2, 3}));
  EXPECT_EQ(calls, 2);
}

TEST(ModuleHooks, RemoveStopsTheHookAndIsIdempotent) {
  Linear fc = small_linear();
  int a = 0, b = 0;
  RemovableHandle ha = fc->register_forward_hook([&](Module&, const TensorList&, const Tensor&) { ++a; });
  fc->register_forward_hook([&](Module&, const TensorList&, const Tensor&) { ++b; });
  fc(randn({2, 3}));
  ha.remove();
  ha.remove();
  fc(randn({2, 3}));
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  EXPECT_TRUE(fc->has_hooks());
}

TEST(ModuleHooks, RemovalAndRegistrationDuringACallTakeEffectFromTheNextCall) {
  Linear fc = small_linear();
  std::vector<std::string> log;
  RemovableHandle second;
  fc->register_forward_hook([&](Module& m, const TensorList&, const Tensor&) {
    log.push_back("first");
    second.remove();  // removes a hook that this call's snapshot still holds
    m.register_forward_hook([&](Module&, const TensorList&, const Tensor&) { log.push_back("late"); });
  });
  second = fc->register_forward_hook([&](Module&, const TensorList&, const Tensor&) { log.push_back("second"); });
  fc(randn({2, 3}));
  EXPECT_THAT(log, ElementsAre("first", "second"));
  log.clear();
  fc(randn({2, 3}));
  EXPECT_THAT(log, ElementsAre("first", "late"));
}

TEST(ModuleHooks, HandleOutlivingItsModuleIsHarmless) {
  RemovableHandle h;
  {
    Linear fc = small_linear();
    h = fc->register_forward_hook([](Module&, const TensorList&, const Tensor&) {});
  }
  h.remove();
}

TEST(ModuleHooks, SequentialCallsItsChildrenWithTheirHooks) {
  manual_seed(3);
  Sequential seq(Linear(3, 4), ReLU(), Linear(4, 2));
  std::vector<std::string> log;
  (*seq)[0]->register_forward_hook([&](Module& m, const TensorList&, const Tensor& out) { log.push_back(m.name() + std::to_string(out.size(1))); });
  (*seq)[2]->register_forward_hook([&](Module& m, const TensorList&, const Tensor& out) { log.push_back(m.name() + std::to_string(out.size(1))); });
  seq(randn({5, 3}));
  EXPECT_THAT(log, ElementsAre("Linear4", "Linear2"));
}

TEST(ModuleHooks, CloneHasItsOwnCopyOfTheHooks) {
  Linear fc = small_linear();
  std::vector<const Module*> modules;
  RemovableHandle h = fc->register_forward_hook([&](Module& m, const TensorList&, const Tensor&) { modules.push_back(&m); });
  auto copy = std::static_pointer_cast<LinearImpl>(fc->clone());
  h.remove();  // the original's only (copy.deepcopy copies the hook dict)
  fc(randn({2, 3}));
  call(*copy, randn({2, 3}));
  ASSERT_EQ(modules.size(), 1u);
  EXPECT_EQ(modules[0], copy.get());
}

TEST(ModuleHooks, ReplacementWithAnotherCountNamesTheHook) {
  Linear fc = small_linear();
  fc->register_forward_pre_hook([](Module&, const TensorList& in) -> std::optional<TensorList> { return TensorList{in[0], in[0]}; }, "doubler");
  try {
    fc(randn({2, 3}));
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("forward pre-hook #0 ('doubler') of Linear returned 2 input tensors but the call has 1"));
  }
}

TEST(ModuleHooks, SingleTensorHookOnATupleOutputSaysSo) {
  Pair m;
  m->register_forward_hook([](Module&, const TensorList&, const Tensor&) {});
  EXPECT_THROW(
      {
        try {
          m(randn({4, 3}), randn({4, 2}), randn({4, 3}));
        } catch (const ValueError& e) {
          EXPECT_THAT(e.what(), HasSubstr("forward returned 2 tensors"));
          throw;
        }
      },
      ValueError);
}

TEST(ModuleHooks, ExceptionInAForwardHookNamesTheHookAndModuleAndKeepsItsType) {
  Linear fc = small_linear();
  fc->register_forward_hook([](Module&, const TensorList&, const Tensor&) { throw std::out_of_range("boom"); }, "checker");
  try {
    fc(randn({2, 3}));
    FAIL() << "expected std::out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_THAT(e.what(), HasSubstr("in forward hook #0 ('checker') of Linear"));
    EXPECT_THAT(e.what(), HasSubstr("boom"));
  }
  // The module is still usable afterwards.
  Linear other = small_linear();
  EXPECT_NO_THROW(other(randn({2, 3})));
}

TEST(ModuleHooks, ExceptionInAFullBackwardHookLeavesBackwardWithTheHookNamed) {
  Linear fc = small_linear();
  fc->register_full_backward_hook([](Module&, const TensorList&, const TensorList&) { throw ValueError("bad gradient"); }, "guard");
  Tensor x = randn({2, 3}).requires_grad_(true);
  Tensor loss = fc(x).sum();
  try {
    loss.backward();
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("full backward hook #0 ('guard') of Linear"));
    EXPECT_THAT(e.what(), HasSubstr("bad gradient"));
  }
}

// grad_input and grad_output as PyTorch 1.13 gives them, and the gradients the inputs and the
// parameters end up with (a hook's returned grad_input changes the inputs' gradients only).
TEST(ModuleHooks, FullBackwardHookMatchesTorch) {
  for (const json& c : golden()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    Pair m;
    const bool rg = c["inputs_require_grad"].get<bool>();
    const bool both = c["use_both"].get<bool>();
    const double scale = c["scale_input0"].is_null() ? 0.0 : c["scale_input0"].get<double>();
    std::vector<std::pair<TensorList, TensorList>> calls;
    m->register_full_backward_hook([&](Module& mod, const TensorList& gi, const TensorList& go) -> std::optional<TensorList> {
      EXPECT_EQ(&mod, m.get());
      calls.emplace_back(gi, go);
      if (scale == 0.0) return std::nullopt;
      TensorList out = gi;
      out[0] = gi[0] * scale;
      return out;
    });
    Tensor x = matrix(golden()["X"]).requires_grad_(rg);
    Tensor y = matrix(golden()["Y"]);
    Tensor z = matrix(golden()["Z"]).requires_grad_(rg);
    auto [a, b] = m(x, y, z);
    Tensor loss = (a * matrix(golden()["C"])).sum();
    if (both) loss = loss + b * 2.0;
    loss.backward();
    ASSERT_EQ(calls.size(), c["calls"].size());
    for (size_t k = 0; k < calls.size(); ++k) {
      const json& want = c["calls"][k];
      ASSERT_EQ(calls[k].first.size(), want["grad_input"].size());
      ASSERT_EQ(calls[k].second.size(), want["grad_output"].size());
      for (size_t i = 0; i < calls[k].first.size(); ++i) EXPECT_TRUE(matches(calls[k].first[i], want["grad_input"][i])) << "grad_input " << i;
      for (size_t i = 0; i < calls[k].second.size(); ++i) EXPECT_TRUE(matches(calls[k].second[i], want["grad_output"][i])) << "grad_output " << i;
    }
    EXPECT_TRUE(matches(x.grad(), c["x_grad"]));
    EXPECT_TRUE(matches(z.grad(), c["z_grad"]));
    EXPECT_TRUE(matches(m->fc->weight.grad(), c["weight_grad"]));
    EXPECT_TRUE(matches(m->fc->bias.grad(), c["bias_grad"]));
  }
}

TEST(ModuleHooks, FullBackwardHookFiresOncePerBackward) {
  Linear fc = small_linear();
  int calls = 0;
  fc->register_full_backward_hook([&](Module&, const TensorList& gi, const TensorList& go) {
    ++calls;
    EXPECT_EQ(gi[0].size_str(), "[4, 3]");
    EXPECT_EQ(go[0].size_str(), "[4, 2]");
  });
  Tensor x = randn({4, 3}).requires_grad_(true);
  Tensor loss = fc(x).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(calls, 1);
  loss.backward();
  EXPECT_EQ(calls, 2);
}

TEST(ModuleHooks, FullBackwardHookNeverFiresWhenTheOutputDoesNotRequireGrad) {
  ReLU relu;
  Linear fc = small_linear();
  int calls = 0;
  auto count = [&](Module&, const TensorList&, const TensorList&) { ++calls; };
  relu->register_full_backward_hook(count);
  fc->register_full_backward_hook(count);
  // No parameter, input without grad: the output does not require grad.
  Tensor out = relu(randn({3}));
  EXPECT_FALSE(out.requires_grad());
  // Grad mode off: nothing is recorded, even with parameters and an input that requires grad.
  Tensor x = randn({2, 3}).requires_grad_(true);
  {
    NoGradGuard no_grad;
    Tensor y = fc(x);
    EXPECT_FALSE(y.requires_grad());
  }
  // A later backward elsewhere does not fire them either.
  (x * 2.0).sum().backward();
  EXPECT_EQ(calls, 0);
}

TEST(ModuleHooks, FullBackwardHookWithNoInputRequiringGradMayNotReturnGradients) {
  Linear fc = small_linear();
  fc->register_full_backward_hook([](Module&, const TensorList& gi, const TensorList&) -> std::optional<TensorList> {
    return TensorList{ones({4, 3})};
  });
  Tensor loss = fc(randn({4, 3})).sum();
  try {
    loss.backward();
    FAIL() << "expected an AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no input requires gradient"));
  }
}

TEST(ModuleHooks, BackwardUsesTheHooksRegisteredWhenForwardRan) {
  Linear fc = small_linear();
  int early = 0, late = 0;
  RemovableHandle h = fc->register_full_backward_hook([&](Module&, const TensorList&, const TensorList&) { ++early; });
  Tensor x = randn({2, 3}).requires_grad_(true);
  Tensor loss = fc(x).sum();
  h.remove();
  fc->register_full_backward_hook([&](Module&, const TensorList&, const TensorList&) { ++late; });
  loss.backward();
  EXPECT_EQ(early, 1);
  EXPECT_EQ(late, 0);
}

TEST(ModuleHooks, FullBackwardPreHookReplacesGradOutput) {
  const json* both = nullptr;
  for (const json& c : golden()["cases"])
    if (c["name"] == "both_outputs") both = &c;
  ASSERT_NE(both, nullptr);
  Pair m;
  TensorList seen_go, seen_by_hook;
  m->register_full_backward_pre_hook([&](Module&, const TensorList& go) -> std::optional<TensorList> {
    seen_go = go;
    return TensorList{go[0] * 2.0, go[1] * 2.0};
  });
  m->register_full_backward_hook([&](Module&, const TensorList&, const TensorList& go) { seen_by_hook = go; });
  Tensor x = matrix(golden()["X"]).requires_grad_(true);
  Tensor z = matrix(golden()["Z"]).requires_grad_(true);
  auto [a, b] = m(x, matrix(golden()["Y"]), z);
  ((a * matrix(golden()["C"])).sum() + b * 2.0).backward();
  const json& want = (*both)["calls"][0];
  ASSERT_EQ(seen_go.size(), 2u);
  EXPECT_TRUE(matches(seen_go[0], want["grad_output"][0]));
  // Everything downstream of the pre-hook sees twice the gradient.
  EXPECT_TRUE(all_close(seen_by_hook[0], tensor_from_json_scaled(want["grad_output"][0], 2.0)));
  EXPECT_TRUE(all_close(x.grad(), tensor_from_json_scaled((*both)["x_grad"], 2.0)));
  EXPECT_TRUE(all_close(m->fc->weight.grad(), tensor_from_json_scaled((*both)["weight_grad"], 2.0)));
}

// The hook nodes are identities: finite differences agree with the hooked module's gradients.
TEST(ModuleHooks, GradcheckThroughAHookedModule) {
  manual_seed(11);
  Linear fc(3, 2);
  fc->to(kFloat64);
  int calls = 0;
  fc->register_full_backward_hook([&](Module&, const TensorList&, const TensorList&) { ++calls; });
  fc->register_forward_hook([](Module&, const TensorList&, const Tensor& out) { return out * out; });
  Tensor x = randn({4, 3}, TensorOptions().dtype(kFloat64)).requires_grad_(true);
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return fc(in[0]); }, {x}));
  EXPECT_GT(calls, 0);
}

}  // namespace
}  // namespace dp::nn
