// LazyLinear: parameters registered but unshaped until the first forward, then shaped from the
// input and initialised as Linear; names, state dicts and printing as PyTorch's
// (tests/golden/gen_lazy.py); to() before the first forward; optimizers made afterwards.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <optional>
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "support/golden.h"

namespace dp::nn {
namespace {

using test::golden_case;
using test::json;

constexpr const char* kFile = "lazy.json";

// The model of gen_lazy.py.
struct Model : Module {
  Linear pre{nullptr};
  LazyLinear fc{nullptr};
  LazyLinear head{nullptr};
  Model() {
    pre = register_module("pre", Linear(5, 6));
    fc = register_module("fc", LazyLinear(4));
    head = register_module("head", LazyLinear(LazyLinearOptions(2).bias(false)));
  }
  Tensor forward(const Tensor& x) { return head(fc(pre(x)).tanh()); }
};

std::vector<std::string> strings(const json& j) { return j.get<std::vector<std::string>>(); }

// PyTorch's parameter shapes, with null (an uninitialized parameter) as our placeholder [0].
std::vector<Shape> shapes(const json& j) {
  std::vector<Shape> out;
  for (const auto& s : j) out.push_back(s.is_null() ? Shape{0} : Shape(s.get<std::vector<int64_t>>()));
  return out;
}
std::vector<Shape> shapes_of(const Module& m) {
  std::vector<Shape> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.value().sizes());
  return out;
}

void expect_described(const Module& m, const json& c, const std::string& when) {
  SCOPED_TRACE(when);
  EXPECT_EQ(m.to_string(), c["repr_" + when].get<std::string>());
  EXPECT_EQ(m.state_dict().keys(), strings(c["keys_" + when]));
  EXPECT_EQ(m.named_parameters().keys(), strings(c["param_names_" + when]));
  EXPECT_EQ(shapes_of(m), shapes(c["param_shapes_" + when]));
}

TEST(LazyLinear, ShapedByTheFirstForwardAsPyTorchsIs) {
  const std::pair<const char*, std::function<ModulePtr()>> cases[] = {
      {"lazy_linear", [] { return LazyLinear(4).ptr(); }},
      {"lazy_linear_nobias", [] { return LazyLinear(LazyLinearOptions(7).bias(false)).ptr(); }},
      {"model", [] { return std::make_shared<Model>(); }},
  };
  for (const auto& [name, make] : cases) {
    SCOPED_TRACE(name);
    const json& c = golden_case(kFile, name);
    ModulePtr m = make();
    expect_described(*m, c, "before");
    EXPECT_EQ(first_uninitialized_module(*m).value_or("<none>"), std::string(name) == "model" ? "fc" : "");
    Tensor x = randn({2, c["in_features"].get<int64_t>()});
    Tensor y = std::string(name) == "model" ? static_cast<Model&>(*m).forward(x) : static_cast<LazyLinearImpl&>(*m).forward(x);
    expect_described(*m, c, "after");
    EXPECT_FALSE(first_uninitialized_module(*m).has_value());
    EXPECT_EQ(y.size(0), 2);
  }
}

TEST(LazyLinear, InitialisedExactlyAsTheEquivalentLinear) {
  Tensor x = randn({3, 5});
  manual_seed(9);
  LazyLinear lazy(4);  // constructing draws nothing
  manual_seed(9);
  Tensor y = lazy(x);
  EXPECT_EQ(lazy->in_features(), 5);
  EXPECT_FALSE(lazy->has_uninitialized_params());
  manual_seed(9);
  Linear ref(5, 4);
  EXPECT_TRUE(equal(lazy->weight, ref->weight));
  EXPECT_TRUE(equal(lazy->bias, ref->bias));
  EXPECT_TRUE(equal(y, ref(x)));
  // Gradients reach the (same, now shaped) parameter tensors.
  y.sum().backward();
  ASSERT_TRUE(lazy->weight.grad().defined());
  EXPECT_EQ(lazy->weight.grad().sizes(), (Shape{4, 5}));
  EXPECT_TRUE(lazy->weight.is_same(lazy->named_parameters()["weight"]));
  EXPECT_TRUE(lazy->weight.requires_grad());
  // reset_parameters re-draws within Linear's bound; before initialisation it does nothing.
  lazy->reset_parameters();
  EXPECT_LE(lazy->weight.abs().max().item<double>(), 1.0 / std::sqrt(5.0));
  LazyLinear fresh(3);
  fresh->reset_parameters();
  EXPECT_TRUE(fresh->has_uninitialized_params());
}

TEST(LazyLinear, HandlesTakenBeforeTheFirstForwardStayValid) {
  LazyLinear lazy(3);
  Tensor w = lazy->weight;
  std::vector<Tensor> params = lazy->parameters();
  EXPECT_EQ(w.sizes(), (Shape{0}));
  lazy(ones({1, 2}));
  EXPECT_EQ(w.sizes(), (Shape{3, 2}));  // shaped in place
  EXPECT_TRUE(params[0].is_same(lazy->weight));
  EXPECT_EQ(params[1].sizes(), (Shape{3}));
}

TEST(LazyLinear, StateDictAfterInitialisationRoundTrips) {
  manual_seed(1);
  auto a = std::make_shared<Model>();
  a->forward(randn({2, 5}));
  manual_seed(2);
  auto b = std::make_shared<Model>();
  // Loading needs the shapes: an uninitialised module reports the mismatch by key.
  try {
    b->load_state_dict(a->state_dict());
    FAIL() << "expected a size mismatch";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("size mismatch for fc.weight"), std::string::npos) << e.what();
  }
  b->fc->initialize_parameters(6);
  b->head->initialize_parameters(4);
  EXPECT_THROW(b->head->initialize_parameters(4), ValueError);
  b->load_state_dict(a->state_dict());
  for (const auto& p : a->named_parameters()) EXPECT_TRUE(equal(p.value(), b->named_parameters()[p.key()])) << p.key();
  Tensor x = randn({3, 5});
  EXPECT_TRUE(equal(a->forward(x), b->forward(x)));
  // A plain Linear with the same shapes takes the lazy layer's state, and the other way round.
  Linear plain(6, 4);
  plain->load_state_dict(a->fc->state_dict());
  EXPECT_TRUE(equal(plain->weight, a->fc->weight));
}

TEST(LazyLinear, ToBeforeTheFirstForwardChoosesDeviceAndDtype) {
  set_cpu_device_count(2);
  LazyLinear lazy(3);
  lazy->to("cpu:1", kFloat64);
  Tensor y = lazy(ones({2, 4}, TensorOptions().device("cpu:1").dtype(kFloat64)));
  EXPECT_EQ(lazy->weight.device(), Device("cpu:1"));
  EXPECT_EQ(lazy->weight.dtype(), kFloat64);
  EXPECT_EQ(lazy->bias.dtype(), kFloat64);
  EXPECT_EQ(y.dtype(), kFloat64);
  // clone() of an uninitialised module is uninitialised too and initialises on its own.
  LazyLinear other(2);
  auto copy = clone(other.ptr());
  copy->forward(ones({1, 7}));
  EXPECT_EQ(copy->in_features(), 7);
  EXPECT_TRUE(other->has_uninitialized_params());
}

TEST(LazyLinear, OptimizerCreatedAfterInitialisationTrains) {
  manual_seed(4);
  auto model = std::make_shared<Model>();
  Tensor x = randn({8, 5});
  Tensor target = randn({8, 2});
  model->forward(x);  // the dummy forward
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss(model->forward(x), target);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(last, first);
  // The lazy layers' parameters were among the optimised ones (they changed).
  manual_seed(4);
  auto untouched = std::make_shared<Model>();
  untouched->forward(x);
  EXPECT_FALSE(equal(untouched->fc->weight, model->fc->weight));
  EXPECT_FALSE(equal(untouched->head->weight, model->head->weight));
}

TEST(LazyLinear, BadInputIsAnError) {
  EXPECT_THROW(LazyLinear(-1), ValueError);
  LazyLinear lazy(3);
  EXPECT_THROW(lazy(scalar_tensor(1.0)), ShapeError);
  EXPECT_TRUE(lazy->has_uninitialized_params());
  EXPECT_THROW(lazy->initialize_parameters(-2), ValueError);
  lazy(ones({2, 4}));
  try {
    lazy(ones({2, 5}));
    FAIL() << "expected a shape error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("the last input dimension must be 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dp::nn
