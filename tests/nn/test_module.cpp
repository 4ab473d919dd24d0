// Module base: registration, queries, modes, devices, state dicts and deep copies.
#include <gtest/gtest.h>
#include <sstream>
#include "dp/nn/nn.h"
#include "support/golden.h"

namespace dp::nn {
namespace {

using dp::test::golden_case;

// The tutorial's model, written the way a user writes it: nothing beyond deriving from Module.
struct Model : Module {
  Linear fc{nullptr};
  Model(int64_t in, int64_t out) { fc = register_module("fc", Linear(in, out)); }
  Tensor forward(const Tensor& x) { return fc(x); }
};

// A user block with a raw parameter member and a child.
struct Block : Module {
  Tensor scale;
  Linear inner{nullptr};
  Block() {
    scale = register_parameter("scale", ones({3}));
    inner = register_module("inner", Linear(3, 3));
  }
  Tensor forward(const Tensor& x) { return inner(x) * scale; }
};

// Tied weights (one tensor in two slots), a buffer, a user child held as ModuleHolder<Block>, the
// same Linear registered twice, and an unregistered cache that copies share (as Python's shallow
// __dict__ copy does).
struct Tied : Module {
  Tensor w1, w2, steps;
  Linear shared{nullptr};
  ModuleHolder<Block> block{nullptr};
  Tensor cache = zeros({1});
  Tied() {
    w1 = register_parameter("w1", ones({3, 3}));
    w2 = register_parameter("w2", w1);
    shared = register_module("first", Linear(3, 3));
    register_module("second", shared);
    block = register_module("block", ModuleHolder<Block>(std::make_shared<Block>()));
    steps = register_buffer("steps", zeros({1}, kInt64));
  }
  Tensor forward(const Tensor& x) { return block(shared(shared(x.matmul(w1) + x.matmul(w2)))); }
};

TEST(Module, RegistrationAndNames) {
  auto m = std::make_shared<Model>(5, 2);
  auto names = m->named_parameters().keys();
  EXPECT_EQ(names, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(m->parameters().size(), 2u);
  EXPECT_EQ(m->parameters(false).size(), 0u);
  EXPECT_EQ(m->children().size(), 1u);
  EXPECT_EQ(m->named_modules().keys(), (std::vector<std::string>{"", "fc"}));
  EXPECT_EQ(m->modules(false).size(), 1u);
  EXPECT_EQ(m->name(), "Model");
  EXPECT_EQ(m->fc->name(), "Linear");
  EXPECT_TRUE(m->fc->weight.requires_grad());
  EXPECT_TRUE(m->fc->weight.is_same(m->named_parameters()["fc.weight"]));
}

TEST(Module, BadRegistrationsAreErrors) {
  Module m;
  m.register_parameter("w", zeros({2}));
  // An existing parameter name is re-pointed (PyTorch's rule; test_module_tying.cpp); a buffer of
  // that name is a clash.
  Tensor w2 = ones({2});
  m.register_parameter("w", w2);
  EXPECT_TRUE(m.named_parameters()["w"].is_same(w2));
  EXPECT_THROW(m.register_buffer("w", zeros({2})), ValueError);
  EXPECT_THROW(m.register_parameter("a.b", zeros({2})), ValueError);
  EXPECT_THROW(m.register_parameter("", zeros({2})), ValueError);
  Tensor leaf = ones({2}, TensorOptions().requires_grad());
  EXPECT_THROW(m.register_parameter("nonleaf", leaf * 2), ValueError);
  try {
    m.register_module("w", Linear(2, 2));
    FAIL() << "expected a name clash";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'w' already registered"), std::string::npos) << e.what();
  }
}

TEST(Module, DeduplicatesParametersButNotStateDictKeys) {
  auto t = std::make_shared<Tied>();
  auto params = t->named_parameters();
  // w2 is w1; "second" is "first": each appears once, under its first name.
  EXPECT_EQ(params.keys(), (std::vector<std::string>{"w1", "first.weight", "first.bias", "block.scale", "block.inner.weight", "block.inner.bias"}));
  auto keys = t->state_dict().keys();
  EXPECT_EQ(keys, (std::vector<std::string>{"w1", "w2", "steps", "first.weight", "first.bias", "second.weight", "second.bias", "block.scale",
                                            "block.inner.weight", "block.inner.bias"}));
  EXPECT_EQ(t->buffers().size(), 1u);
  EXPECT_EQ(t->children().size(), 2u);  // first (== second), block
}

TEST(Module, TrainEvalRecurse) {
  auto t = std::make_shared<Tied>();
  t->eval();
  for (auto& m : t->modules()) EXPECT_FALSE(m->is_training());
  t->train();
  for (auto& m : t->modules()) EXPECT_TRUE(m->is_training());
}

TEST(Module, ZeroGradBothModes) {
  auto m = std::make_shared<Model>(5, 2);
  m->forward(ones({3, 5})).sum().backward();
  ASSERT_TRUE(m->fc->weight.grad().defined());
  m->zero_grad(false);
  EXPECT_TRUE(m->fc->weight.grad().defined());
  EXPECT_EQ(m->fc->weight.grad().abs().sum().item<double>(), 0.0);
  m->zero_grad();
  EXPECT_FALSE(m->fc->weight.grad().defined());
}

TEST(Module, ToDeviceAndDtypeInPlace) {
  auto m = std::make_shared<Tied>();
  Tensor handle = m->block->scale;  // e.g. held by an optimizer
  m->forward(ones({2, 3})).sum().backward();
  m->to(Device("cpu:1"));
  for (auto& p : m->parameters()) EXPECT_EQ(p.device(), Device("cpu:1"));
  EXPECT_EQ(handle.device(), Device("cpu:1"));
  EXPECT_EQ(handle.grad().device(), Device("cpu:1"));
  EXPECT_EQ(m->steps.device(), Device("cpu:1"));
  m->to(kFloat64);
  EXPECT_EQ(handle.dtype(), kFloat64);
  EXPECT_EQ(m->steps.dtype(), kInt64);  // only floating tensors convert
  EXPECT_TRUE(m->w1.is_same(m->w2));
  Tensor y = m->forward(ones({2, 3}, TensorOptions(kFloat64).device(Device("cpu:1"))));
  EXPECT_EQ(y.device(), Device("cpu:1"));
  EXPECT_THROW(m->to(kInt64), DTypeError);
}

TEST(Module, StateDictRoundTrip) {
  auto a = std::make_shared<Model>(5, 2);
  auto b = std::make_shared<Model>(5, 2);
  auto res = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(res.missing_keys.empty());
  EXPECT_TRUE(dp::equal(a->fc->weight, b->fc->weight));
  EXPECT_FALSE(a->fc->weight.is_same(b->fc->weight));
  // state_dict tensors alias the module's, detached.
  auto sd = a->state_dict();
  EXPECT_FALSE(sd["fc.weight"].requires_grad());
  EXPECT_EQ(sd["fc.weight"].data_ptr(), a->fc->weight.data_ptr());
}

TEST(Module, LoadStateDictReportsEveryProblemByName) {
  auto m = std::make_shared<Model>(5, 2);
  TensorDict sd;
  sd.insert("fc.weight", zeros({3, 5}));
  sd.insert("fc.extra", zeros({1}));
  try {
    m->load_state_dict(sd);
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Error(s) in loading state_dict for Model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Missing key(s) in state_dict: \"fc.bias\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("Unexpected key(s) in state_dict: \"fc.extra\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("size mismatch for fc.weight: copying a param with shape [3, 5] from checkpoint, the shape in current model is [2, 5]"),
              std::string::npos)
        << msg;
  }
  // Non-strict: missing/unexpected are returned, shapes still checked.
  TensorDict partial;
  partial.insert("fc.bias", full({2}, 7.0));
  partial.insert("other", zeros({1}));
  auto res = m->load_state_dict(partial, false);
  EXPECT_EQ(res.missing_keys, std::vector<std::string>{"fc.weight"});
  EXPECT_EQ(res.unexpected_keys, std::vector<std::string>{"other"});
  EXPECT_EQ(m->fc->bias.to_vector<float>(), (std::vector<float>{7, 7}));
  partial.insert("fc.weight", zeros({1}));
  EXPECT_THROW(m->load_state_dict(partial, false), ValueError);
}

TEST(Module, LoadConvertsDtypeAndDevice) {
  auto m = std::make_shared<Model>(2, 1);
  TensorDict sd;
  sd.insert("fc.weight", tensor<double>({1.5, -2.0}, {1, 2}).to(Device("cpu:1")));
  sd.insert("fc.bias", tensor<double>({0.25}));
  m->load_state_dict(sd);
  EXPECT_EQ(m->fc->weight.dtype(), kFloat32);
  EXPECT_EQ(m->fc->weight.device(), Device::cpu());
  EXPECT_EQ(m->fc->weight.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
}

TEST(Module, PrintsAsPyTorch) {
  auto m = std::make_shared<Model>(5, 2);
  EXPECT_EQ(m->to_string(), golden_case("nn_basic.json", "repr_model")["repr"].get<std::string>());
  std::ostringstream os;
  os << Linear(LinearOptions(3, 4).bias(false));
  EXPECT_EQ(os.str(), golden_case("nn_basic.json", "repr_linear_nobias")["repr"].get<std::string>());
  EXPECT_EQ(Sequential()->to_string(), golden_case("nn_basic.json", "repr_empty_sequential")["repr"].get<std::string>());
}

TEST(ModuleClone, UserModelNeedsNoBoilerplate) {
  auto m = std::make_shared<Model>(5, 2);
  auto c = clone(m);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c.get(), m.get());
  EXPECT_NE(c->fc.get(), m->fc.get());                    // the member follows the copy
  EXPECT_EQ(c->fc.get(), c->own_children()["fc"].get());  // and agrees with the registry
  EXPECT_FALSE(c->fc->weight.is_same(m->fc->weight));
  EXPECT_TRUE(c->fc->weight.is_same(c->named_parameters()["fc.weight"]));
  EXPECT_NE(c->fc->weight.data_ptr(), m->fc->weight.data_ptr());
  EXPECT_TRUE(dp::equal(c->fc->weight, m->fc->weight));
  EXPECT_TRUE(c->fc->weight.requires_grad());
  EXPECT_TRUE(c->fc->weight.is_leaf());
  // Independent: training the copy leaves the original alone.
  Tensor x = ones({4, 5});
  c->forward(x).sum().backward();
  EXPECT_TRUE(c->fc->weight.grad().defined());
  EXPECT_FALSE(m->fc->weight.grad().defined());
  {
    NoGradGuard g;
    c->fc->weight.add_(1.0);
  }
  EXPECT_FALSE(dp::equal(c->fc->weight, m->fc->weight));
}

TEST(ModuleClone, TiedSharedNestedAndUnregistered) {
  auto t = std::make_shared<Tied>();
  t->eval();
  auto c = clone(t);
  EXPECT_TRUE(c->w1.is_same(c->w2));  // tied stays tied
  EXPECT_FALSE(c->w1.is_same(t->w1));
  EXPECT_EQ(c->own_children()["first"].get(), c->own_children()["second"].get());  // shared stays shared
  EXPECT_EQ(c->shared.get(), c->own_children()["first"].get());
  EXPECT_NE(c->block.get(), t->block.get());  // user child follows
  EXPECT_NE(c->block->inner.get(), t->block->inner.get());
  EXPECT_TRUE(c->block->scale.is_same(c->block->named_parameters()["scale"]));
  EXPECT_FALSE(c->block->scale.is_same(t->block->scale));
  EXPECT_FALSE(c->steps.is_same(t->steps));  // buffers are copied
  EXPECT_TRUE(c->cache.is_same(t->cache));   // unregistered state is shared
  EXPECT_FALSE(c->is_training());
  EXPECT_EQ(c->state_dict().keys(), t->state_dict().keys());
  Tensor x = rand({2, 3});
  EXPECT_TRUE(dp::allclose(c->forward(x), t->forward(x)));
}

TEST(ModuleClone, ToAnotherDeviceKeepsGradients) {
  auto m = std::make_shared<Model>(5, 2);
  m->forward(ones({1, 5})).sum().backward();
  auto c = clone(m, Device("cpu:1"));
  EXPECT_EQ(c->fc->weight.device(), Device("cpu:1"));
  ASSERT_TRUE(c->fc->weight.grad().defined());
  EXPECT_TRUE(dp::equal(c->fc->weight.grad().cpu(), m->fc->weight.grad()));
  EXPECT_EQ(m->fc->weight.device(), Device::cpu());
}

TEST(ModuleClone, SequentialAndModuleList) {
  Sequential seq(Linear(4, 8), ReLU(), Linear(8, 2));
  auto c = std::static_pointer_cast<SequentialImpl>(seq->clone());
  ASSERT_EQ(c->size(), 3u);
  Tensor x = rand({3, 4});
  EXPECT_TRUE(dp::allclose(c->forward(x), seq(x)));
  EXPECT_NE(c->ptr<LinearImpl>(0).get(), seq->ptr<LinearImpl>(0).get());
  ModuleList list(Linear(2, 2), Tanh());
  auto lc = std::static_pointer_cast<ModuleListImpl>(list->clone());
  EXPECT_EQ(lc->size(), 2u);
  EXPECT_NE(lc->ptr<LinearImpl>(0)->weight.data_ptr(), list->ptr<LinearImpl>(0)->weight.data_ptr());
}

TEST(ModuleClone, UnknownTypeAndNonCopyableAreClearErrors) {
  // Registered through a base-class pointer: its exact type was never seen.
  auto parent = std::make_shared<Module>();
  std::shared_ptr<Module> child = std::make_shared<Model>(2, 2);
  parent->register_module("child", child);
  parent->remember_type<Module>();
  try {
    parent->clone();
    FAIL() << "expected an error";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot copy module 'child' of type Model"), std::string::npos) << e.what();
  }
  struct NoCopy : Module {
    NoCopy() = default;
    NoCopy(const NoCopy&) = delete;
  };
  auto nc = std::make_shared<NoCopy>();
  EXPECT_THROW(clone(nc), NotImplementedError);
}

TEST(ModuleClone, CloneWithCustomFactory) {
  auto m = std::make_shared<Model>(3, 2);
  // Untyped clone_with() needs the exact type recorded (nn::clone / DataParallel do it).
  EXPECT_THROW(m->clone(), NotImplementedError);
  m->remember_type<Model>();
  int calls = 0;
  auto c = std::static_pointer_cast<Model>(m->clone_with([&](const Tensor& t, bool is_param) {
    ++calls;
    EXPECT_TRUE(is_param);
    return zeros_like(t);
  }));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(c->fc->weight.abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(c->fc->weight.requires_grad());  // the factory decides
}

TEST(ModuleClone, OutsideCloneCopiesAreShallow) {
  Model a(2, 2);
  Model b = a;  // plain C++ copy: shares parameters and children, like Python's copy.copy
  EXPECT_EQ(a.fc.get(), b.fc.get());
  EXPECT_TRUE(a.fc->weight.is_same(b.fc->weight));
}

}  // namespace
}  // namespace dp::nn
