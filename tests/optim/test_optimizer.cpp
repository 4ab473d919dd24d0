// The optimizer machinery around the update formulas (which test_optim_golden checks against
// PyTorch): param groups and option inheritance, zero_grad, skipping parameters without gradient,
// in-place updates under no-grad with version bumps, non-contiguous parameters, closures, the
// argument checks and their messages, and the state-dict round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <cstring>
#include <nlohmann/json.hpp>
#include "dp/core/threads.h"
#include "dp/optim/optim.h"
#include "support/golden.h"

namespace dp {
namespace {

using ::testing::HasSubstr;
using optim::Adam;
using optim::AdamOptions;
using optim::AdamW;
using optim::AdamWOptions;
using optim::OptimizerParamGroup;
using optim::SGD;
using optim::SGDOptions;

Tensor leaf(IntArrayRef shape, uint64_t seed, DType dtype = kFloat32) {
  Generator gen(seed);
  return randn(shape, dtype, &gen).requires_grad_(true);
}

// Deterministic pseudo-gradient for step k of parameter i.
Tensor fake_grad(const Tensor& p, int k, int i) {
  Generator gen(1000 + 17 * k + i);
  return randn(p.sizes(), p.dtype(), &gen);
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Expects `f` to throw E with a message containing `part`.
template <typename E, typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << part;
  } catch (const E& e) {
    EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

// ---------------------------------------------------------------- groups and options

TEST(OptimizerGroups, UnsetGroupOptionsInheritTheDefaults) {
  Tensor a = leaf({3}, 1), b = leaf({3}, 2), c = leaf({3}, 3);
  SGD opt({OptimizerParamGroup({a}),                                               // no options: all defaults
           OptimizerParamGroup({b}, SGDOptions().lr(0.01)),                        // lr only
           OptimizerParamGroup({c}, SGDOptions().momentum(0.0).nesterov(false))},  // explicit values win
          SGDOptions(0.1).momentum(0.9).weight_decay(0.01).dampening(0.0));
  ASSERT_EQ(opt.param_groups().size(), 3u);
  const auto& o0 = static_cast<const SGDOptions&>(opt.param_groups()[0].options());
  const auto& o1 = static_cast<const SGDOptions&>(opt.param_groups()[1].options());
  const auto& o2 = static_cast<const SGDOptions&>(opt.param_groups()[2].options());
  EXPECT_EQ(o0.lr(), 0.1);
  EXPECT_EQ(o0.momentum(), 0.9);
  EXPECT_EQ(o1.lr(), 0.01);
  EXPECT_EQ(o1.momentum(), 0.9);
  EXPECT_EQ(o1.weight_decay(), 0.01);
  EXPECT_EQ(o2.lr(), 0.1);
  EXPECT_EQ(o2.momentum(), 0.0);
  EXPECT_EQ(o2.weight_decay(), 0.01);
  EXPECT_EQ(opt.size(), 3u);
  ASSERT_EQ(opt.parameters().size(), 3u);
  EXPECT_TRUE(opt.parameters()[1].is_same(b));
}

TEST(OptimizerGroups, AdamWDefaultsAndBetas) {
  Tensor a = leaf({2}, 1), b = leaf({2}, 2);
  AdamW opt({OptimizerParamGroup({a}), OptimizerParamGroup({b}, AdamWOptions().betas({0.5, 0.6}))}, AdamWOptions(0.003));
  const auto& o0 = static_cast<const AdamWOptions&>(opt.param_groups()[0].options());
  const auto& o1 = static_cast<const AdamWOptions&>(opt.param_groups()[1].options());
  EXPECT_EQ(o0.weight_decay(), 0.01);  // AdamW's default decay
  EXPECT_EQ(o0.lr(), 0.003);
  EXPECT_EQ(std::get<0>(o0.betas()), 0.9);
  EXPECT_EQ(std::get<1>(o0.betas()), 0.999);
  EXPECT_EQ(o1.lr(), 0.003);
  EXPECT_EQ(std::get<0>(o1.betas()), 0.5);
  EXPECT_EQ(std::get<1>(o1.betas()), 0.6);
  EXPECT_EQ(AdamOptions().weight_decay(), 0.0);
  EXPECT_EQ(AdamOptions().lr(), 1e-3);
  EXPECT_EQ(AdamOptions().eps(), 1e-8);
}

TEST(OptimizerGroups, AddParamGroupAndLearningRateAccessors) {
  Tensor a = leaf({2}, 1), b = leaf({2}, 2);
  SGD opt({a}, SGDOptions(0.5));
  opt.add_param_group(OptimizerParamGroup({b}, SGDOptions().lr(0.25)));
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.get_lr(0), 0.5);
  EXPECT_EQ(opt.get_lr(1), 0.25);
  opt.set_lr(1, 0.125);
  EXPECT_EQ(opt.param_groups()[1].options().get_lr(), 0.125);
  opt.param_groups()[0].options().set_lr(2.0);
  EXPECT_EQ(opt.get_lr(0), 2.0);
  expect_error<IndexError>([&] { opt.get_lr(2); }, "param group 2 out of range");
  // The new group's parameter is updated with its own rate: p -= 0.125 * g.
  Tensor before = b.detach().clone();
  b.set_grad(ones({2}));
  opt.step();
  EXPECT_EQ(b.to_vector<float>()[0], before.to_vector<float>()[0] - 0.125f);
  expect_error<ValueError>([&] { opt.add_param_group(OptimizerParamGroup({a})); }, "appears more than once");
}

// ---------------------------------------------------------------- zero_grad, step mechanics

TEST(OptimizerStep, ZeroGradBothModes) {
  Tensor a = leaf({2, 3}, 1), b = leaf({4}, 2);
  SGD opt({a, b}, SGDOptions(0.1));
  (a.sum() + b.sum()).backward();
  ASSERT_TRUE(a.grad().defined());
  Tensor ga = a.grad();
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(a.grad().defined());
  EXPECT_TRUE(a.grad().is_same(ga));  // zeroed in place, same tensor
  EXPECT_EQ(a.grad().sum().item<double>(), 0.0);
  EXPECT_EQ(b.grad().abs().sum().item<double>(), 0.0);
  (a.sum() * 2).backward();
  EXPECT_EQ(a.grad().sum().item<double>(), 12.0);  // accumulated into the zeroed gradient
  opt.zero_grad();                                 // default: set to none
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  opt.zero_grad();  // nothing to do: fine
}

TEST(OptimizerStep, SkipsParametersWithoutGradAndBumpsVersions) {
  Tensor a = leaf({5}, 1), b = leaf({5}, 2);
  Adam opt({a, b}, AdamOptions(0.1));
  Tensor b0 = b.detach().clone();
  const uint32_t va = a.version(), vb = b.version();
  a.set_grad(ones({5}));
  opt.step();
  EXPECT_GT(a.version(), va);
  EXPECT_EQ(b.version(), vb);
  EXPECT_TRUE(bits_equal(b.detach(), b0));
  EXPECT_EQ(opt.state().count(a.unsafe_impl()), 1u);
  EXPECT_EQ(opt.state().count(b.unsafe_impl()), 0u);
  // In place: the handle's storage is the same and aliases see the update.
  Tensor alias = a.detach();
  a.set_grad(ones({5}));
  opt.step();
  EXPECT_TRUE(bits_equal(alias, a.detach()));
}

TEST(OptimizerStep, RunsUnderNoGradAndKeepsParametersLeaves) {
  Tensor w = leaf({3}, 1);
  SGD opt({w}, SGDOptions(0.1).momentum(0.9));
  Tensor y = (w * w).sum();  // saves w for backward
  w.set_grad(ones({3}));
  ASSERT_TRUE(GradMode::is_enabled());
  opt.step();
  EXPECT_TRUE(GradMode::is_enabled());  // restored
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.grad_fn(), nullptr);
  // y saved w before the in-place update: backward through it must now fail, as in PyTorch.
  EXPECT_THROW(y.backward(), AutogradError);
}

TEST(OptimizerStep, ClosureIsCalledWithGradModeOnAndItsLossReturned) {
  Tensor w = leaf({3}, 1);
  Tensor w0 = w.detach().clone();
  SGD opt({w}, SGDOptions(0.5));
  NoGradGuard outer;  // the closure still records a graph
  Tensor loss = opt.step([&] {
    opt.zero_grad();
    Tensor l = (w * w).sum();
    l.backward();
    return l;
  });
  ASSERT_TRUE(loss.defined());
  EXPECT_NEAR(loss.item<double>(), (w0 * w0).sum().item<double>(), 1e-6);
  // w -= 0.5 * 2w = 0.
  EXPECT_EQ(w.abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(opt.step().defined());  // no closure: undefined loss
}

TEST(OptimizerStep, NonContiguousParameterMatchesContiguousOne) {
  for (int which = 0; which < 2; ++which) {
    Tensor base = leaf({4, 3}, 7);
    Tensor t = base.detach().t();  // a non-contiguous leaf [3, 4]
    t.requires_grad_(true);
    ASSERT_FALSE(t.is_contiguous());
    Tensor c = t.detach().contiguous().requires_grad_(true);
    std::unique_ptr<optim::Optimizer> o1, o2;
    if (which == 0) {
      o1 = std::make_unique<SGD>(std::vector<Tensor>{t}, SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
      o2 = std::make_unique<SGD>(std::vector<Tensor>{c}, SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
    } else {
      o1 = std::make_unique<Adam>(std::vector<Tensor>{t}, AdamOptions(0.1).amsgrad(true));
      o2 = std::make_unique<Adam>(std::vector<Tensor>{c}, AdamOptions(0.1).amsgrad(true));
    }
    const uint32_t v0 = t.version();
    for (int k = 0; k < 3; ++k) {
      Tensor g = fake_grad(c, k, 0);
      t.set_grad(g.t().contiguous().t());  // a non-contiguous gradient too
      c.set_grad(g);
      o1->step();
      o2->step();
    }
    EXPECT_GT(t.version(), v0);
    EXPECT_TRUE(bits_equal(t.detach(), c.detach())) << (which == 0 ? "SGD" : "Adam");
    EXPECT_TRUE(bits_equal(base.detach().t(), c.detach()));  // written back into the original storage
  }
}

TEST(OptimizerStep, Float64AndManyParameters) {
  std::vector<Tensor> ps;
  for (int i = 0; i < 6; ++i) ps.push_back(leaf({i + 1, 7}, i, i % 2 ? kFloat64 : kFloat32));
  AdamW opt(ps, AdamWOptions(0.01));
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(fake_grad(ps[i], k, static_cast<int>(i)));
    opt.step();
  }
  for (const Tensor& p : ps) {
    auto* st = dynamic_cast<optim::AdamParamState*>(opt.state().at(p.unsafe_impl()).get());
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->step, 3);
    EXPECT_EQ(st->exp_avg.dtype(), p.dtype());
    EXPECT_FALSE(st->max_exp_avg_sq.defined());
  }
}

// A large update is cut into pieces that the host's threads take (backend/cpu/optim_updates.cpp):
// with two threads the parameters and state are the same bits as with one, for a parameter list
// mixing large and small tensors, in float32 and bfloat16, for SGD (momentum) and AdamW (amsgrad).
TEST(OptimizerStep, LargeListOnTwoThreadsMatchesOneThread) {
  const int before = get_num_threads();
  auto run = [](int threads, int which, DType dtype) {
    set_num_threads(threads);
    std::vector<Tensor> ps = {leaf({300001}, 1, dtype), leaf({17}, 2, dtype), leaf({513, 257}, 3, dtype)};
    std::unique_ptr<optim::Optimizer> o;
    if (which == 0)
      o = std::make_unique<SGD>(ps, SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
    else
      o = std::make_unique<AdamW>(ps, AdamWOptions(0.01).amsgrad(true));
    for (int k = 0; k < 3; ++k) {
      for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(fake_grad(ps[i], k, static_cast<int>(i)));
      o->step();
    }
    std::vector<Tensor> out;
    for (const Tensor& p : ps) out.push_back(p.detach().clone());
    if (which == 1)
      for (const Tensor& p : ps) {
        auto* st = dynamic_cast<optim::AdamParamState*>(o->state().at(p.unsafe_impl()).get());
        out.push_back(st->exp_avg);
        out.push_back(st->exp_avg_sq);
        out.push_back(st->max_exp_avg_sq);
      }
    return out;
  };
  for (DType dtype : {kFloat32, kBFloat16})
    for (int which = 0; which < 2; ++which) {
      std::vector<Tensor> one = run(1, which, dtype), two = run(2, which, dtype);
      ASSERT_EQ(one.size(), two.size());
      for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bits_equal(one[i], two[i])) << (which ? "AdamW" : "SGD") << " " << dtype << " tensor " << i;
    }
  set_num_threads(before);
}

// ---------------------------------------------------------------- argument checks

TEST(OptimizerErrors, ParameterLists) {
  expect_error<ValueError>([] { SGD(std::vector<Tensor>{}, SGDOptions(0.1)); }, "empty parameter list");
  expect_error<ValueError>([] { Adam(std::vector<OptimizerParamGroup>{}); }, "empty parameter list");
  Tensor a = leaf({2}, 1);
  expect_error<ValueError>([&] { SGD({OptimizerParamGroup({a}), OptimizerParamGroup({a})}, SGDOptions(0.1)); }, "appears more than once");
  expect_error<ValueError>([&] { SGD({a, a}, SGDOptions(0.1)); }, "appears more than once");
  Tensor nonleaf = a * 2;
  expect_error<ValueError>([&] { SGD({nonleaf}, SGDOptions(0.1)); }, "can't optimize a non-leaf Tensor");
  expect_error<ValueError>([&] { SGD({Tensor()}, SGDOptions(0.1)); }, "undefined tensor");
  expect_error<DTypeError>([&] { SGD({zeros({2}, kInt64)}, SGDOptions(0.1)); }, "int64");
  expect_error<DTypeError>([&] { Adam({zeros({2}, kInt32)}); }, "int32");
  // A tensor labelled with a CUDA device that does not exist here (over host memory; never
  // dereferenced): rejected by device, on machines with or without GPUs.
  static float host[2];
  const Device missing = Device::cuda(cuda_device_count());
  auto storage = std::make_shared<StorageImpl>(host, sizeof(host), missing, [](void*) {});
  Tensor on_cuda(std::make_shared<TensorImpl>(storage, Shape{2}, Shape{1}, 0, kFloat32));
  expect_error<DeviceError>([&] { SGD({on_cuda}, SGDOptions(0.1)); }, missing.str());
  // CPU devices are fine.
  EXPECT_NO_THROW(SGD({zeros({2}, Device::cpu(0)).requires_grad_(true)}, SGDOptions(0.1)));
}

TEST(OptimizerErrors, HyperParameters) {
  Tensor a = leaf({2}, 1);
  expect_error<ValueError>([&] { SGD({a}, SGDOptions(-0.1)); }, "invalid learning rate: -0.1");
  expect_error<ValueError>([&] { SGD({a}, SGDOptions()); }, "must give a learning rate");
  expect_error<ValueError>([&] { SGD({a}, SGDOptions(0.1).momentum(-0.5)); }, "invalid momentum value: -0.5");
  expect_error<ValueError>([&] { SGD({a}, SGDOptions(0.1).weight_decay(-1)); }, "invalid weight_decay value: -1");
  expect_error<ValueError>([&] { SGD({a}, SGDOptions(0.1).nesterov(true)); }, "Nesterov momentum requires a momentum and zero dampening");
  expect_error<ValueError>([&] { SGD({a}, SGDOptions(0.1).nesterov(true).momentum(0.9).dampening(0.1)); }, "zero dampening");
  expect_error<ValueError>([&] { Adam({a}, AdamOptions(-1e-3)); }, "Adam: invalid learning rate");
  expect_error<ValueError>([&] { Adam({a}, AdamOptions().betas({1.0, 0.999})); }, "invalid beta parameter at index 0: 1");
  expect_error<ValueError>([&] { Adam({a}, AdamOptions().betas({0.9, -0.1})); }, "invalid beta parameter at index 1: -0.1");
  expect_error<ValueError>([&] { AdamW({a}, AdamWOptions().betas({0.9, 1.5})); }, "AdamW: invalid beta parameter at index 1");
  expect_error<ValueError>([&] { Adam({a}, AdamOptions().eps(-1)); }, "invalid epsilon value");
  expect_error<ValueError>([&] { AdamW({a}, AdamWOptions().weight_decay(-0.01)); }, "invalid weight_decay value");
  // A group's options are checked after inheritance: nesterov from the group, momentum 0 from the defaults.
  expect_error<ValueError>([&] { SGD({OptimizerParamGroup({a}, SGDOptions().nesterov(true))}, SGDOptions(0.1)); }, "Nesterov");
  // Options of another optimizer's type.
  expect_error<ValueError>([&] { SGD({OptimizerParamGroup({a}, AdamOptions(0.1))}, SGDOptions(0.1)); }, "SGDOptions");
}

// ---------------------------------------------------------------- state dict

// Runs `make(params)` for 20 steps uninterrupted, and for 10 steps, state_dict, a fresh optimizer
// (on copies of the parameters) with the state loaded, 10 more steps: both must agree bit for bit.
void check_round_trip(const std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>& make,
                      const std::vector<std::string>& expected_keys) {
  auto make_params = [] { return std::vector<Tensor>{leaf({3, 4}, 11), leaf({6}, 12, kFloat64), leaf({2}, 13), leaf({40}, 14)}; };
  auto set_grads = [](std::vector<Tensor>& ps, int k) {
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(i == 2 ? Tensor() : fake_grad(ps[i], k, static_cast<int>(i)));
  };
  std::vector<Tensor> ref = make_params();
  auto ref_opt = make(ref);
  std::vector<Tensor> run = make_params();
  auto opt = make(run);
  for (int k = 0; k < 10; ++k) {
    set_grads(ref, k);
    ref_opt->step();
    set_grads(run, k);
    opt->step();
  }
  optim::OptimizerState saved = opt->state_dict();
  EXPECT_EQ(saved.tensors.keys(), expected_keys);
  // A fresh optimizer over copies of the parameters: its own (different) lr must be replaced.
  std::vector<Tensor> resumed;
  for (const Tensor& p : run) resumed.push_back(p.detach().clone().requires_grad_(true));
  opt.reset();
  run.clear();
  auto fresh = make(resumed);
  for (size_t g = 0; g < fresh->param_groups().size(); ++g) fresh->set_lr(g, 123.0);
  fresh->load_state_dict(saved);
  for (size_t g = 0; g < fresh->param_groups().size(); ++g) EXPECT_EQ(fresh->get_lr(g), ref_opt->get_lr(g));
  // Loading copies: the saved tensors are not the fresh optimizer's buffers.
  if (!fresh->state().empty()) {
    const optim::OptimizerState own = fresh->state_dict();
    for (const auto& item : saved.tensors)
      for (const auto& o : own.tensors)
        if (o.key() == item.key() && item.key().find(".step") == std::string::npos) {
          EXPECT_FALSE(o.value().is_same(item.value()));
        }
  }
  for (int k = 10; k < 20; ++k) {
    set_grads(ref, k);
    ref_opt->step();
    set_grads(resumed, k);
    fresh->step();
  }
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(bits_equal(ref[i].detach(), resumed[i].detach())) << "parameter " << i;
}

TEST(OptimizerStateDict, SgdRoundTripContinuesIdentically) {
  check_round_trip(
      [](const std::vector<Tensor>& p) {
        return std::make_unique<SGD>(std::vector<OptimizerParamGroup>{OptimizerParamGroup({p[0], p[1]}),
                                                                      OptimizerParamGroup({p[2], p[3]}, SGDOptions().lr(0.05).nesterov(true))},
                                     SGDOptions(0.1).momentum(0.9));
      },
      {"state.0.momentum_buffer", "state.1.momentum_buffer", "state.3.momentum_buffer"});
}

TEST(OptimizerStateDict, AdamRoundTripContinuesIdentically) {
  check_round_trip(
      [](const std::vector<Tensor>& p) {
        return std::make_unique<Adam>(
            std::vector<OptimizerParamGroup>{OptimizerParamGroup({p[0], p[1]}),
                                             OptimizerParamGroup({p[2], p[3]}, AdamOptions().amsgrad(true).weight_decay(0.1))},
            AdamOptions(0.01));
      },
      {"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq", "state.3.step",
       "state.3.exp_avg", "state.3.exp_avg_sq", "state.3.max_exp_avg_sq"});
}

TEST(OptimizerStateDict, AdamWRoundTripContinuesIdentically) {
  check_round_trip(
      [](const std::vector<Tensor>& p) {
        return std::make_unique<AdamW>(std::vector<Tensor>{p[0], p[1], p[2], p[3]}, AdamWOptions(0.02).maximize(true));
      },
      {"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq", "state.3.step",
       "state.3.exp_avg", "state.3.exp_avg_sq"});
}

TEST(OptimizerStateDict, LayoutMatchesTorchOptim) {
  Tensor a = leaf({2, 2}, 1), b = leaf({3}, 2), c = leaf({1}, 3);
  Adam opt({OptimizerParamGroup({a, b}), OptimizerParamGroup({c}, AdamOptions().lr(0.5).betas({0.8, 0.9}))}, AdamOptions(0.01));
  a.set_grad(ones({2, 2}));
  opt.step();
  opt.step();
  optim::OptimizerState s = opt.state_dict();
  EXPECT_EQ(s.metadata.at("optimizer"), "Adam");
  auto groups = nlohmann::json::parse(s.metadata.at("param_groups"));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0]["params"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(groups[1]["params"], nlohmann::json::array({2}));
  EXPECT_EQ(groups[0]["lr"], 0.01);
  EXPECT_EQ(groups[1]["lr"], 0.5);
  EXPECT_EQ(groups[1]["betas"], nlohmann::json::array({0.8, 0.9}));
  EXPECT_EQ(groups[1]["eps"], 1e-8);
  EXPECT_EQ(groups[1]["amsgrad"], false);
  EXPECT_EQ(s.tensors.keys(), (std::vector<std::string>{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq"}));
  const Tensor& step = s.tensors["state.0.step"];
  EXPECT_EQ(step.dim(), 0);
  EXPECT_EQ(step.dtype(), kInt64);
  EXPECT_EQ(step.item<int64_t>(), 2);
  // A step saved by PyTorch 1.13 (a float32 scalar) loads too.
  s.tensors["state.0.step"] = scalar_tensor(2.0, kFloat32);
  opt.load_state_dict(s);
  EXPECT_EQ(static_cast<optim::AdamParamState&>(*opt.state().at(a.unsafe_impl())).step, 2);
  // The state aliases the buffers (as PyTorch's does).
  EXPECT_TRUE(opt.state_dict().tensors["state.0.exp_avg"].is_same(static_cast<optim::AdamParamState&>(*opt.state().at(a.unsafe_impl())).exp_avg));
}

TEST(OptimizerStateDict, LoadChecksAndLeavesTheOptimizerUnchangedOnError) {
  Tensor a = leaf({2, 2}, 1), b = leaf({3}, 2);
  SGD opt({OptimizerParamGroup({a}), OptimizerParamGroup({b})}, SGDOptions(0.1).momentum(0.9));
  a.set_grad(ones({2, 2}));
  b.set_grad(ones({3}));
  opt.step();
  const optim::OptimizerState good = opt.state_dict();
  const Tensor buf_before = good.tensors["state.0.momentum_buffer"].clone();

  auto with = [&](const std::function<void(optim::OptimizerState&)>& edit) {
    optim::OptimizerState s = good;
    edit(s);
    return s;
  };
  auto groups_json = [&](const std::function<void(nlohmann::json&)>& edit) {
    return with([&](optim::OptimizerState& s) {
      auto j = nlohmann::json::parse(s.metadata["param_groups"]);
      edit(j);
      s.metadata["param_groups"] = j.dump();
    });
  };
  expect_error<ValueError>([&] { opt.load_state_dict(groups_json([](nlohmann::json& j) { j.erase(1); })); },
                           "the loaded state has 1 parameter groups but this optimizer has 2");
  expect_error<ValueError>([&] { opt.load_state_dict(groups_json([](nlohmann::json& j) { j[1]["params"].push_back(7); })); },
                           "param group 1 has 2 parameters in the loaded state but 1 in this optimizer");
  expect_error<ShapeError>([&] { opt.load_state_dict(with([](optim::OptimizerState& s) { s.tensors["state.1.momentum_buffer"] = zeros({4}); })); },
                           "state.1.momentum_buffer has shape [4] but its parameter has shape [3]");
  expect_error<ValueError>([&] { opt.load_state_dict(with([](optim::OptimizerState& s) {
                                   s.tensors.insert("state.0.exp_avg", zeros({2, 2}));
                                 })); },
                           "unexpected key 'state.0.exp_avg'");
  expect_error<ValueError>(
      [&] { opt.load_state_dict(with([](optim::OptimizerState& s) { s.tensors.insert("state.5.momentum_buffer", zeros({3})); })); },
      "refers to parameter 5");
  expect_error<ValueError>([&] { opt.load_state_dict(with([](optim::OptimizerState& s) { s.tensors.insert("momentum", zeros({3})); })); },
                           "unexpected key 'momentum'");
  expect_error<ValueError>([&] { opt.load_state_dict(with([](optim::OptimizerState& s) { s.metadata.erase("param_groups"); })); },
                           "no 'param_groups'");
  expect_error<ValueError>([&] { opt.load_state_dict(with([](optim::OptimizerState& s) { s.metadata["param_groups"] = "[{"; })); }, "not valid JSON");
  expect_error<ValueError>([&] { opt.load_state_dict(with([](optim::OptimizerState& s) { s.metadata["optimizer"] = "Adam"; })); },
                           "saved by Adam, not SGD");
  expect_error<ValueError>([&] { opt.load_state_dict(groups_json([](nlohmann::json& j) { j[0]["momentum"] = "high"; })); },
                           "option 'momentum' must be a number");
  expect_error<ValueError>([&] { opt.load_state_dict(groups_json([](nlohmann::json& j) { j[0]["lr"] = -1.0; })); }, "invalid learning rate");
  // Nothing changed by the failed loads.
  EXPECT_EQ(opt.get_lr(0), 0.1);
  EXPECT_TRUE(bits_equal(opt.state_dict().tensors["state.0.momentum_buffer"], buf_before));

  // Adam: a parameter's state must be complete.
  Adam adam({a});
  a.set_grad(ones({2, 2}));
  adam.step();
  optim::OptimizerState as = adam.state_dict();
  as.tensors.erase("state.0.exp_avg_sq");
  expect_error<ValueError>([&] { adam.load_state_dict(as); }, "lacks state.0.exp_avg_sq");
  as = adam.state_dict();
  as.tensors["state.0.step"] = scalar_tensor(-1.0);
  expect_error<ValueError>([&] { adam.load_state_dict(as); }, "state.0.step must be a whole number >= 0");

  // Hyper-parameters come back from the saved groups; state tensors are cast to the parameter's dtype.
  optim::OptimizerState s = groups_json([](nlohmann::json& j) { j[1]["lr"] = 0.75; });
  s.tensors["state.0.momentum_buffer"] = s.tensors["state.0.momentum_buffer"].to(kFloat64);
  opt.load_state_dict(s);
  EXPECT_EQ(opt.get_lr(1), 0.75);
  EXPECT_EQ(static_cast<optim::SGDParamState&>(*opt.state().at(a.unsafe_impl())).momentum_buffer.dtype(), kFloat32);
}

}  // namespace
}  // namespace dp
