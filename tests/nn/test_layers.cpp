// Basic layers against PyTorch: Linear, Embedding, activations, Flatten, Sequential, printing.
#include <gtest/gtest.h>
#include <cmath>
#include "dp/nn/nn.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp::nn {
namespace {

using dp::test::all_close;
using dp::test::golden_case;
using dp::test::tensor_from_json;

void load_params(Module& m, const dp::test::json& params) {
  TensorDict sd;
  for (auto& [k, v] : params.items()) sd.insert(k, tensor_from_json(v));
  m.load_state_dict(sd);
}

class LinearGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearGolden, ForwardAndBackward) {
  const auto& c = golden_case("nn_basic.json", GetParam());
  Tensor w = tensor_from_json(c["params"]["weight"]);
  Linear lin(w.size(1), w.size(0));
  lin->to(w.dtype());
  load_params(*lin, c["params"]);
  Tensor x = tensor_from_json(c["input"], true);
  Tensor y = lin(x);
  EXPECT_TRUE(all_close(y, c["output"], 1e-5, 1e-6));
  y.backward(tensor_from_json(c["grad_output"]));
  EXPECT_TRUE(all_close(x.grad(), c["grads"]["input"], 1e-5, 1e-6));
  EXPECT_TRUE(all_close(lin->weight.grad(), c["grads"]["weight"], 1e-5, 1e-5));
  EXPECT_TRUE(all_close(lin->bias.grad(), c["grads"]["bias"], 1e-5, 1e-5));
}
INSTANTIATE_TEST_SUITE_P(Cases, LinearGolden, ::testing::Values("linear_float32_2d", "linear_float32_3d", "linear_float64_2d", "linear_float64_3d"));

TEST(Linear, DefaultInitBoundsAsPyTorch) {
  Linear lin(400, 300);
  double bound = 1.0 / std::sqrt(400.0);
  EXPECT_LE(lin->weight.abs().max().item<double>(), bound);
  EXPECT_GT(lin->weight.abs().max().item<double>(), 0.95 * bound);
  // U(-b, b) has variance b^2 / 3.
  double var = lin->weight.var({0, 1}).item<double>();
  EXPECT_NEAR(var, bound * bound / 3.0, 0.03 * bound * bound / 3.0);
  EXPECT_LE(lin->bias.abs().max().item<double>(), bound);
  EXPECT_FALSE(Linear(LinearOptions(3, 2).bias(false))->bias.defined());
}

TEST(Linear, GradcheckAndErrors) {
  Linear lin(3, 2);
  lin->to(kFloat64);
  EXPECT_TRUE(dp::test::gradcheck([&](const std::vector<Tensor>& in) { return lin(in[0]); }, {dp::test::rand_leaf({4, 3})}));
  try {
    lin(zeros({4, 5}, kFloat64));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos) << e.what();
  }
}

TEST(Linear, DoubleBackward) {
  Linear lin(3, 2);
  lin->to(kFloat64);
  dp::test::GradcheckOptions o;
  o.check_grad_grad = true;
  Tensor w = lin->weight;
  EXPECT_TRUE(dp::test::gradcheck([&](const std::vector<Tensor>& in) { return tanh(linear(in[0], in[1])); },
                                  {dp::test::rand_leaf({4, 3}), w.detach().clone().requires_grad_(true)}, o));
}

TEST(Embedding, PaddingIdxAsPyTorch) {
  const auto& c = golden_case("nn_basic.json", "embedding_padding");
  Embedding emb(EmbeddingOptions(6, 4).padding_idx(2));
  EXPECT_EQ(emb->weight.select(0, 2).abs().sum().item<double>(), 0.0);  // padding row starts at zero
  load_params(*emb, c["params"]);
  Tensor y = emb(tensor_from_json(c["input"]));
  EXPECT_TRUE(all_close(y, c["output"]));
  y.backward(tensor_from_json(c["grad_output"]));
  EXPECT_TRUE(all_close(emb->weight.grad(), c["grads"]["weight"]));
  EXPECT_THROW(Embedding(EmbeddingOptions(6, 4).padding_idx(6)), IndexError);
  EXPECT_THROW(emb(tensor<int64_t>({7})), IndexError);
}

TEST(Embedding, InitIsStandardNormal) {
  Embedding emb(1000, 10);
  EXPECT_NEAR(emb->weight.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(emb->weight.var({0, 1}).item<double>(), 1.0, 0.05);
}

TEST(Activations, MatchOps) {
  Tensor x = randn({3, 4});
  EXPECT_TRUE(dp::equal(ReLU()(x), relu(x)));
  EXPECT_TRUE(dp::equal(Sigmoid()(x), sigmoid(x)));
  EXPECT_TRUE(dp::equal(Tanh()(x), tanh(x)));
  EXPECT_TRUE(dp::equal(GELU()(x), gelu(x)));
  EXPECT_TRUE(dp::equal(GELU("tanh")(x), gelu(x, "tanh")));
  EXPECT_TRUE(dp::equal(Softmax(1)(x), softmax(x, 1)));
  EXPECT_TRUE(dp::equal(LogSoftmax(-1)(x), log_softmax(x, -1)));
  EXPECT_EQ(Flatten()(zeros({2, 3, 4})).sizes(), (Shape{2, 12}));
  EXPECT_EQ(Flatten(0, 1)(zeros({2, 3, 4})).sizes(), (Shape{6, 4}));
  Tensor y = x.clone();
  ReLU(true)(y);
  EXPECT_TRUE(dp::equal(y, relu(x)));
  EXPECT_THROW(GELU("fast"), ValueError);
  EXPECT_TRUE(dp::equal(Identity()(x), x));
}

TEST(Sequential, RunsInOrderAndIndexes) {
  Sequential seq(Linear(4, 3), ReLU(), Linear(3, 1), Sigmoid());
  Tensor x = randn({5, 4});
  auto l0 = seq->ptr<LinearImpl>(0);
  auto l2 = seq->ptr<LinearImpl>(2);
  Tensor expect = sigmoid(l2->forward(relu(l0->forward(x))));
  EXPECT_TRUE(dp::allclose(seq(x), expect));
  EXPECT_EQ(seq->size(), 4u);
  EXPECT_THROW(seq->ptr<LinearImpl>(1), ValueError);
  EXPECT_THROW((*seq)[9], IndexError);
  EXPECT_EQ(seq->state_dict().keys(), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  Sequential named;
  named->push_back("encoder", Linear(2, 2));
  named->push_back("act", ReLU());
  EXPECT_EQ(named->named_parameters().keys(), (std::vector<std::string>{"encoder.weight", "encoder.bias"}));
}

// The same structures as PyTorch print the same and have the same state_dict keys.
struct Block2Model : Module {
  Linear block1{nullptr}, block3{nullptr};
  Sequential block2{nullptr};
  Block2Model() {
    block1 = register_module("block1", Linear(10, 20));
    block2 = register_module("block2", Sequential(Linear(20, 20), ReLU()));
    block3 = register_module("block3", Linear(20, 5));
  }
};

struct Net : Module {
  Net() {
    register_module("embed", Embedding(1000, 10));
    register_module("layers", ModuleList(Linear(10, 10), Linear(LinearOptions(10, 4).bias(false))));
    register_module("head", Sequential(GELU(), Flatten(), Sigmoid(), Tanh(), ReLU(true), Softmax(1), LogSoftmax(-1), Identity(),
                                       Embedding(EmbeddingOptions(5, 3).padding_idx(-2)), GELU("tanh")));
  }
};

void expect_like_pytorch(const Module& m, const std::string& case_name) {
  const auto& c = golden_case("nn_basic.json", case_name);
  EXPECT_EQ(m.to_string(), c["repr"].get<std::string>());
  EXPECT_EQ(m.state_dict().keys(), c["keys"].get<std::vector<std::string>>());
  EXPECT_EQ(m.named_parameters().keys(), c["param_names"].get<std::vector<std::string>>());
}

TEST(PyTorchParity, ReprAndKeys) {
  expect_like_pytorch(Block2Model(), "repr_block2");
  expect_like_pytorch(Net(), "repr_net");
}

}  // namespace
}  // namespace dp::nn
