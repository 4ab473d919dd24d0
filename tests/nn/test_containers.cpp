// ParameterList, ParameterDict and ModuleDict: names, printing, forward/backward against PyTorch
// (tests/golden/gen_containers.py), state dicts and checkpoint files, to(), clone() and bad input.
#include <gtest/gtest.h>
#include "dp/nn/nn.h"
#include "support/golden.h"
#include "support/temp_files.h"

namespace dp::nn {
namespace {

using dp::test::all_close;
using dp::test::golden_case;
using dp::test::tensor_from_json;

constexpr const char* kFile = "containers.json";

// The model of gen_containers.py.
struct Model : Module {
  Linear fc{nullptr};
  ParameterList scales{nullptr};
  ParameterDict gates{nullptr};
  ModuleDict heads{nullptr};
  Model() {
    fc = register_module("fc", Linear(4, 3));
    scales = register_module("scales", ParameterList(randn({3}), randn({3, 3})));
    gates = register_module("gates", ParameterDict());
    gates->insert("input", randn({3}));
    gates->insert("output", randn({2}));
    heads = register_module("heads", ModuleDict());
    heads->insert("cls", Linear(3, 2));
    heads->insert("aux", Sequential(Linear(3, 3), Tanh()));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = fc(x) * scales->at(0);
    h = h.matmul(scales->at(1)) + gates->get("input");
    h = heads->at<SequentialImpl>("aux")->forward(h);
    return heads->at<LinearImpl>("cls")->forward(h) * (*gates)["output"];
  }
};

std::vector<std::string> strings(const test::json& j) { return j.get<std::vector<std::string>>(); }

TEST(Containers, NamesKeysAndPrintingArePyTorchs) {
  auto m = std::make_shared<Model>();
  const auto& c = golden_case(kFile, "model");
  EXPECT_EQ(m->named_parameters().keys(), strings(c["param_names"]));
  EXPECT_EQ(m->state_dict().keys(), strings(c["keys"]));
  EXPECT_EQ(m->to_string(), c["repr"].get<std::string>());
}

TEST(Containers, PrintingDetailsArePyTorchs) {
  auto plist = ParameterList(zeros({2, 3, 4}, kFloat64));
  plist->append(scalar_tensor(1.0), /*requires_grad=*/false);
  auto pdict = ParameterDict();
  pdict->insert("w", zeros({5}, kFloat64));
  pdict->insert("n", zeros({2}, kInt64), /*requires_grad=*/false);
  const std::pair<std::string, std::shared_ptr<Module>> cases[] = {
      {"repr_parameter_list", plist.ptr()},
      {"repr_parameter_dict", pdict.ptr()},
      {"repr_parameter_list_one", ParameterList(zeros({7})).ptr()},
      {"repr_parameter_list_empty", ParameterList().ptr()},
      {"repr_parameter_dict_empty", ParameterDict().ptr()},
      {"repr_module_dict_empty", ModuleDict().ptr()},
  };
  for (const auto& [name, m] : cases) {
    SCOPED_TRACE(name);
    const auto& c = golden_case(kFile, name);
    EXPECT_EQ(m->to_string(), c["repr"].get<std::string>());
    EXPECT_EQ(m->state_dict().keys(), strings(c["keys"]));
    EXPECT_EQ(m->named_parameters().keys(), strings(c["param_names"]));
  }
  EXPECT_FALSE(plist->at(1).requires_grad());
  EXPECT_TRUE(plist->at(0).requires_grad());
}

TEST(Containers, ForwardAndBackwardMatchPyTorch) {
  const auto& c = golden_case(kFile, "forward_float64");
  auto m = std::make_shared<Model>();
  m->to(kFloat64);
  TensorDict state;
  for (const auto& [name, t] : c["params"].items()) state.insert(name, tensor_from_json(t));
  m->load_state_dict(state);
  Tensor x = tensor_from_json(c["input"], /*requires_grad=*/true);
  Tensor y = m->forward(x);
  EXPECT_TRUE(all_close(y, c["output"], 1e-12, 1e-12));
  y.pow(2).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), c["grads"]["input"], 1e-12, 1e-12));
  for (const auto& p : m->named_parameters()) {
    SCOPED_TRACE(p.key());
    ASSERT_TRUE(p.value().grad().defined());
    EXPECT_TRUE(all_close(p.value().grad(), c["grads"][p.key()], 1e-12, 1e-12));
  }
}

TEST(Containers, StateDictRoundTripsThroughMemoryAndFiles) {
  manual_seed(1);
  auto a = std::make_shared<Model>();
  manual_seed(2);
  auto b = std::make_shared<Model>();
  ASSERT_FALSE(equal(a->scales->at(1), b->scales->at(1)));
  b->load_state_dict(a->state_dict());
  for (const auto& p : a->named_parameters()) EXPECT_TRUE(equal(p.value(), b->named_parameters()[p.key()])) << p.key();
  // The handles the containers give out are the ones that received the values (loaded in place).
  EXPECT_TRUE(b->scales->at(1).is_same(b->named_parameters()["scales.1"]));
  EXPECT_TRUE(equal(b->gates->get("output"), a->gates->get("output")));

  test::TempDir dir;
  const std::string path = (dir.path / "containers.safetensors").string();
  manual_seed(3);
  auto c = std::make_shared<Model>();
  save(a, path);
  load(c, path);
  for (const auto& p : a->named_parameters()) EXPECT_TRUE(equal(p.value(), c->named_parameters()[p.key()])) << p.key();

  // A missing container entry is reported by its PyTorch key.
  TensorDict partial = a->state_dict();
  TensorDict without;
  for (const auto& item : partial)
    if (item.key() != "gates.output") without.insert(item.key(), item.value());
  try {
    c->load_state_dict(without);
    FAIL() << "expected a missing key";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("\"gates.output\""), std::string::npos) << e.what();
  }
}

TEST(Containers, ToMovesTheContainersParametersInPlace) {
  set_cpu_device_count(2);
  auto m = std::make_shared<Model>();
  Tensor held = m->scales->at(1);  // a handle taken before the move (as an optimizer holds one)
  m->to("cpu:1");
  for (const auto& p : m->named_parameters()) EXPECT_EQ(p.value().device(), Device("cpu:1")) << p.key();
  EXPECT_TRUE(held.is_same(m->scales->at(1)));
  EXPECT_EQ(held.device(), Device("cpu:1"));
  EXPECT_EQ(m->gates->get("input").device(), Device("cpu:1"));
  EXPECT_EQ(m->heads->at<LinearImpl>("cls")->weight.device(), Device("cpu:1"));
  m->to(kFloat64);
  EXPECT_EQ(m->gates->get("output").dtype(), kFloat64);
  EXPECT_EQ(m->forward(randn({2, 4}, TensorOptions().device("cpu:1").dtype(kFloat64))).sizes(), (Shape{2, 2}));
}

TEST(Containers, CloneCopiesEveryContainerAndItsLookupsFollowTheCopy) {
  auto m = std::make_shared<Model>();
  auto c = clone(m);
  EXPECT_EQ(c->named_parameters().keys(), m->named_parameters().keys());
  for (const auto& p : m->named_parameters()) {
    const Tensor q = c->named_parameters()[p.key()];  // a copy: the dict is a temporary
    EXPECT_FALSE(q.is_same(p.value())) << p.key();
    EXPECT_TRUE(equal(q, p.value())) << p.key();
  }
  // The copy's members and lookups reach the copy's own tensors and children.
  EXPECT_FALSE(c->scales.get() == m->scales.get());
  EXPECT_TRUE(c->scales->at(0).is_same(c->named_parameters()["scales.0"]));
  EXPECT_TRUE(c->gates->get("input").is_same(c->named_parameters()["gates.input"]));
  EXPECT_TRUE(c->heads->at<LinearImpl>("cls")->weight.is_same(c->named_parameters()["heads.cls.weight"]));
  {
    NoGradGuard no_grad;
    c->scales->at(0).fill_(7.0);
    c->heads->at<LinearImpl>("cls")->weight.fill_(7.0);
  }
  EXPECT_FALSE(equal(m->scales->at(0), c->scales->at(0)));
  EXPECT_FALSE(equal(m->heads->at<LinearImpl>("cls")->weight, c->heads->at<LinearImpl>("cls")->weight));
  Tensor x = randn({3, 4});
  EXPECT_EQ(c->forward(x).sizes(), m->forward(x).sizes());
}

TEST(Containers, ParameterListOperations) {
  ParameterList list;
  EXPECT_TRUE(list->is_empty());
  Tensor a = list->append(ones({2}));
  list->extend({zeros({3}), full({1}, 2.0)});
  EXPECT_EQ(list->size(), 3u);
  EXPECT_TRUE(list->at(0).is_same(a));
  EXPECT_TRUE(list->at(-1).is_same(list->at(2)));
  EXPECT_TRUE(a.requires_grad());
  EXPECT_EQ(list->named_parameters().keys(), (std::vector<std::string>{"0", "1", "2"}));
  size_t n = 0;
  for (const auto& item : *list) EXPECT_EQ(item.key(), std::to_string(n++));
  EXPECT_EQ(list->items().size(), 3u);
  EXPECT_THROW(list->at(3), IndexError);
  EXPECT_THROW(list->at(-4), IndexError);
  EXPECT_THROW(list->append(Tensor()), ValueError);
  Tensor leaf = ones({2}, TensorOptions().requires_grad());
  EXPECT_THROW(list->append(leaf * 2), ValueError);  // not a leaf: register t.detach()
  EXPECT_EQ(list->size(), 3u);
  list->append((leaf * 2).detach());
  EXPECT_EQ(list->size(), 4u);
}

TEST(Containers, ParameterDictOperations) {
  ParameterDict dict;
  dict->insert("b", ones({2}));
  dict->update({{"a", zeros({3})}, {"c", zeros({1})}});
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"b", "a", "c"}));  // insertion order
  EXPECT_EQ(dict->size(), 3u);
  EXPECT_TRUE(dict->contains("a"));
  EXPECT_FALSE(dict->contains("z"));
  EXPECT_EQ(dict->values().size(), 3u);
  try {
    dict->get("z");
    FAIL() << "expected a missing key";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("'z'"), std::string::npos) << e.what();
  }
  try {
    dict->insert("a", ones({3}));
    FAIL() << "expected a duplicate key";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'a' is already present"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dict->insert("x.y", ones({1})), ValueError);
  EXPECT_THROW(dict->insert("", ones({1})), ValueError);
  EXPECT_THROW(dict->insert("u", Tensor()), ValueError);
  auto from_list = ParameterDict(std::vector<std::pair<std::string, Tensor>>{{"w", ones({2})}, {"v", ones({1})}});
  EXPECT_EQ(from_list->keys(), (std::vector<std::string>{"w", "v"}));
}

TEST(Containers, ModuleDictOperations) {
  ModuleDict dict(std::vector<std::pair<std::string, ModulePtr>>{{"fc", Linear(2, 3).ptr()}, {"act", ReLU().ptr()}});
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"fc", "act"}));
  EXPECT_EQ(dict->named_parameters().keys(), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(dict->at<LinearImpl>("fc")->options.out_features(), 3);
  EXPECT_TRUE(dict->contains("act"));
  EXPECT_THROW(dict->at<LinearImpl>("act"), ValueError);
  EXPECT_THROW((*dict)["nope"], IndexError);
  EXPECT_THROW(dict->insert("x", std::shared_ptr<LinearImpl>()), ValueError);
  EXPECT_THROW(dict->insert("a.b", Linear(1, 1)), ValueError);
  // Inserting under an existing key replaces the module in its place.
  dict->insert("fc", Linear(2, 5));
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"fc", "act"}));
  EXPECT_EQ(dict->at<LinearImpl>("fc")->options.out_features(), 5);
  EXPECT_EQ(dict->state_dict()["fc.weight"].sizes(), (Shape{5, 2}));
  EXPECT_EQ(dict->size(), 2u);
  size_t n = 0;
  for (const auto& item : *dict) n += item.value() != nullptr;
  EXPECT_EQ(n, 2u);
  // The clone of a dict holds clones of its modules, which clone() can copy by their own type.
  auto copy = clone(dict.ptr());
  EXPECT_NE(copy->at<LinearImpl>("fc").get(), dict->at<LinearImpl>("fc").get());
  EXPECT_TRUE(equal(copy->at<LinearImpl>("fc")->weight, dict->at<LinearImpl>("fc")->weight));
}

}  // namespace
}  // namespace dp::nn
