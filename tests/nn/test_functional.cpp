// dp::nn::functional (namespace F, as libtorch users alias it): each function gives exactly what
// the corresponding module or dp op gives, the options' setters and defaults are libtorch's, the
// functions written with dp ops (leaky_relu, normalize, pad) match PyTorch 1.13
// (tests/golden/functional.json from tests/golden/gen_functional.py) in values and gradients, and
// libtorch's MNIST example Net::forward, written with F::, compiles, runs and trains.
#include <gtest/gtest.h>
#include <array>
#include <cmath>
#include <vector>
#include <string>
#include <type_traits>
#include "dp/autograd/gradcheck.h"
#include "dp/nn/nn.h"
#include "support/golden.h"

namespace dp {
namespace {

namespace F = dp::nn::functional;
using test::all_close;
using test::json;
using test::tensor_from_json;

// ---- libtorch's aliases of the modules' options ----
static_assert(std::is_same_v<F::MaxPool2dFuncOptions, nn::MaxPool2dOptions>);
static_assert(std::is_same_v<F::AvgPool2dFuncOptions, nn::AvgPool2dOptions>);
static_assert(std::is_same_v<F::AdaptiveAvgPool2dFuncOptions, nn::AdaptiveAvgPool2dOptions>);
static_assert(std::is_same_v<F::CrossEntropyFuncOptions, nn::CrossEntropyLossOptions>);
static_assert(std::is_same_v<F::NLLLossFuncOptions, nn::NLLLossOptions>);
static_assert(std::is_same_v<F::MSELossFuncOptions, nn::MSELossOptions>);
static_assert(std::is_same_v<F::BinaryCrossEntropyFuncOptions, nn::BCELossOptions>);
static_assert(std::is_same_v<F::BinaryCrossEntropyWithLogitsFuncOptions, nn::BCEWithLogitsLossOptions>);

TEST(Functional, ActivationsEqualTheModules) {
  manual_seed(0);
  const Tensor x = randn({3, 5});
  EXPECT_TRUE(equal(F::relu(x), nn::ReLU()(x)));
  EXPECT_TRUE(equal(F::gelu(x), nn::GELU()(x)));
  EXPECT_TRUE(equal(F::gelu(x, F::GELUFuncOptions().approximate("tanh")), nn::GELU("tanh")(x)));
  EXPECT_TRUE(equal(F::silu(x), dp::silu(x)));
  EXPECT_TRUE(equal(F::softmax(x, F::SoftmaxFuncOptions(1)), nn::Softmax(1)(x)));
  EXPECT_TRUE(equal(F::softmax(x, 0), nn::Softmax(0)(x)));  // an int converts, as in libtorch
  EXPECT_TRUE(equal(F::log_softmax(x, F::LogSoftmaxFuncOptions(1)), nn::LogSoftmax(1)(x)));
  // dtype: computed in that dtype (the input converted first).
  const Tensor p = F::softmax(x, F::SoftmaxFuncOptions(1).dtype(kFloat64));
  EXPECT_EQ(p.dtype(), kFloat64);
  EXPECT_TRUE(equal(p, dp::softmax(x.to(kFloat64), 1)));
}

TEST(Functional, ReluInplaceOverwritesTheInput) {
  Tensor x = tensor({-1.0, 2.0, -3.0});
  const Tensor y = F::relu(x, F::ReLUFuncOptions(true));
  EXPECT_TRUE(y.is_same(x));
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{0.0, 2.0, 0.0}));
  Tensor z = tensor({-1.0, 2.0});
  F::relu(z, F::ReLUFuncOptions().inplace(false));
  EXPECT_EQ(z.to_vector<double>(), (std::vector<double>{-1.0, 2.0}));  // not in place
}

TEST(Functional, LinearAndConvEqualTheModules) {
  manual_seed(1);
  nn::Linear fc(6, 4);
  const Tensor v = randn({2, 6});
  EXPECT_TRUE(equal(F::linear(v, fc->weight, fc->bias), fc(v)));
  EXPECT_TRUE(equal(F::linear(v, fc->weight), dp::linear(v, fc->weight)));

  nn::Conv2d conv(nn::Conv2dOptions(3, 4, 3).stride(2).padding(1).dilation(1));
  const Tensor x = randn({2, 3, 9, 9});
  EXPECT_TRUE(equal(F::conv2d(x, conv->weight, F::Conv2dFuncOptions().bias(conv->bias).stride(2).padding(1)), conv(x)));
  nn::Conv2d grouped(nn::Conv2dOptions(4, 4, {3, 1}).groups(2).dilation({2, 1}).bias(false));
  const Tensor x4 = randn({1, 4, 8, 6});
  EXPECT_TRUE(equal(F::conv2d(x4, grouped->weight, F::Conv2dFuncOptions().groups(2).dilation({2, 1})), grouped(x4)));
}

TEST(Functional, PoolingEqualsTheModules) {
  manual_seed(2);
  const Tensor x = randn({2, 3, 9, 9});
  EXPECT_TRUE(equal(F::max_pool2d(x, F::MaxPool2dFuncOptions(2).stride(2)), nn::MaxPool2d(2)(x)));
  const auto mo = F::MaxPool2dFuncOptions(3).stride(2).padding(1).dilation(1).ceil_mode(true);
  EXPECT_TRUE(equal(F::max_pool2d(x, mo), nn::MaxPool2d(mo)(x)));
  const auto [v, i] = F::max_pool2d_with_indices(x, mo);
  const auto [mv, mi] = nn::MaxPool2d(mo)->forward_with_indices(x);
  EXPECT_TRUE(equal(v, mv));
  EXPECT_TRUE(equal(i, mi));
  const auto ao = F::AvgPool2dFuncOptions(3).stride(2).padding(1).count_include_pad(false);
  EXPECT_TRUE(equal(F::avg_pool2d(x, ao), nn::AvgPool2d(ao)(x)));
  EXPECT_TRUE(equal(F::avg_pool2d(x, F::AvgPool2dFuncOptions(2)), dp::avg_pool2d(x, 2)));
  EXPECT_TRUE(
      equal(F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions({2, 3})), nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({2, 3}))(x)));
  EXPECT_EQ(F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).sizes(), (Shape{2, 3, 1, 1}));
}

TEST(Functional, DropoutFollowsTheOptions) {
  const Tensor x = ones({1000});
  // Not training: the input itself, whatever p is.
  EXPECT_TRUE(F::dropout(x, F::DropoutFuncOptions().p(0.9).training(false)).is_same(x));
  // Training: the same mask as the module draws from the same seed.
  manual_seed(3);
  const Tensor a = F::dropout(x, F::DropoutFuncOptions().p(0.3));
  manual_seed(3);
  nn::Dropout d(0.3);
  const Tensor b = d(x);
  EXPECT_TRUE(equal(a, b));
  const double kept = (a != 0).to(kFloat64).sum().item<double>();
  EXPECT_GT(kept, 600);
  EXPECT_LT(kept, 800);
  // inplace: the input is overwritten and returned.
  Tensor y = ones({8});
  manual_seed(4);
  const Tensor z = F::dropout(y, F::DropoutFuncOptions().p(0.5).inplace(true));
  EXPECT_TRUE(z.is_same(y));
  EXPECT_THROW(F::dropout(x, F::DropoutFuncOptions().p(1.5)), ValueError);
}

TEST(Functional, NormalizationEqualsTheModules) {
  manual_seed(5);
  nn::BatchNorm2d bn(nn::BatchNormOptions(3).momentum(0.2).eps(1e-3));
  const Tensor x = randn({4, 3, 5, 5});
  const Tensor rm = bn->running_mean.clone(), rv = bn->running_var.clone();
  const Tensor want = bn(x);  // training: batch statistics, buffers updated
  const Tensor got = F::batch_norm(x, rm, rv, F::BatchNormFuncOptions().weight(bn->weight).bias(bn->bias).training(true).momentum(0.2).eps(1e-3));
  EXPECT_TRUE(allclose(got, want, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(rm, bn->running_mean, 1e-6, 1e-7));
  EXPECT_TRUE(allclose(rv, bn->running_var, 1e-6, 1e-7));
  bn->eval();
  // The functional default is eval (training false), with the running statistics.
  EXPECT_TRUE(allclose(F::batch_norm(x, rm, rv, F::BatchNormFuncOptions().weight(bn->weight).bias(bn->bias).eps(1e-3)), bn(x), 1e-6, 1e-6));

  nn::LayerNorm ln(nn::LayerNormOptions({5}).eps(1e-6));
  const Tensor y = randn({2, 3, 5});
  EXPECT_TRUE(equal(F::layer_norm(y, F::LayerNormFuncOptions({5}).weight(ln->weight).bias(ln->bias).eps(1e-6)), ln(y)));
  EXPECT_TRUE(equal(F::layer_norm(y, F::LayerNormFuncOptions({3, 5})), dp::layer_norm(y, {3, 5})));
}

TEST(Functional, LossesEqualTheModules) {
  manual_seed(6);
  const Tensor logits = randn({6, 4});
  const Tensor target = tensor<int64_t>({0, 3, -1, 2, 1, -1});
  const Tensor w = tensor({1.0f, 2.0f, 0.5f, 1.5f});
  const auto ce = F::CrossEntropyFuncOptions().ignore_index(-1).weight(w).label_smoothing(0.1);
  EXPECT_TRUE(equal(F::cross_entropy(logits, target, ce), nn::CrossEntropyLoss(ce)(logits, target)));
  EXPECT_TRUE(std::isfinite(F::cross_entropy(logits, target, F::CrossEntropyFuncOptions().ignore_index(-1)).item<double>()));
  const Tensor lp = log_softmax(logits, 1);
  const auto nl = F::NLLLossFuncOptions().ignore_index(-1).reduction(Reduction::Sum);
  EXPECT_TRUE(equal(F::nll_loss(lp, target, nl), nn::NLLLoss(nl)(lp, target)));
  const Tensor a = randn({3, 4}), b = randn({3, 4});
  EXPECT_TRUE(equal(F::mse_loss(a, b), nn::MSELoss()(a, b)));
  EXPECT_TRUE(equal(F::mse_loss(a, b, F::MSELossFuncOptions().reduction(Reduction::None)), nn::MSELoss(Reduction::None)(a, b)));
  EXPECT_TRUE(equal(F::l1_loss(a, b, F::L1LossFuncOptions(Reduction::Sum)), nn::L1Loss(Reduction::Sum)(a, b)));
  const Tensor prob = sigmoid(a), t01 = (b > 0).to(kFloat32);
  const auto bo = F::BinaryCrossEntropyFuncOptions().weight(rand({3, 4}));
  EXPECT_TRUE(equal(F::binary_cross_entropy(prob, t01, bo), nn::BCELoss(bo)(prob, t01)));
  const auto lo = F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(tensor({1.0f, 2.0f, 3.0f, 0.5f}));
  EXPECT_TRUE(equal(F::binary_cross_entropy_with_logits(a, t01, lo), nn::BCEWithLogitsLoss(lo)(a, t01)));
}

TEST(Functional, EmbeddingEqualsTheModule) {
  manual_seed(7);
  nn::Embedding emb(nn::EmbeddingOptions(10, 3).padding_idx(-2));
  const Tensor idx = tensor<int64_t>({1, 8, 8, 0}, {2, 2});
  EXPECT_TRUE(equal(F::embedding(idx, emb->weight, F::EmbeddingFuncOptions().padding_idx(-2)), emb(idx)));
  // padding_idx: that row gets no gradient.
  Tensor w = randn({10, 3}).set_requires_grad(true);
  F::embedding(idx, w, F::EmbeddingFuncOptions().padding_idx(8)).sum().backward();
  EXPECT_EQ(w.grad().select(0, 8).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(w.grad().select(0, 1).sum().item<double>(), 3.0);
  EXPECT_THROW(F::embedding(idx, w, F::EmbeddingFuncOptions().padding_idx(10)), ValueError);
}

TEST(Functional, OptionDefaultsAndSettersAreLibtorchs) {
  EXPECT_FALSE(F::ReLUFuncOptions().inplace());
  EXPECT_TRUE(F::ReLUFuncOptions(true).inplace());
  EXPECT_DOUBLE_EQ(F::LeakyReLUFuncOptions().negative_slope(), 0.01);
  EXPECT_DOUBLE_EQ(F::LeakyReLUFuncOptions().negative_slope(0.2).negative_slope(), 0.2);
  EXPECT_EQ(F::GELUFuncOptions().approximate(), "none");
  EXPECT_EQ(F::SoftmaxFuncOptions(2).dim(), 2);
  EXPECT_FALSE(F::SoftmaxFuncOptions(2).dtype().has_value());
  const auto d = F::DropoutFuncOptions();
  EXPECT_DOUBLE_EQ(d.p(), 0.5);
  EXPECT_TRUE(d.training());
  EXPECT_FALSE(d.inplace());
  const auto dd = F::DropoutFuncOptions().p(0.2).training(false).inplace(true);
  EXPECT_DOUBLE_EQ(dd.p(), 0.2);
  EXPECT_FALSE(dd.training());
  EXPECT_TRUE(dd.inplace());
  const auto c = F::Conv2dFuncOptions();
  EXPECT_FALSE(c.bias().defined());
  EXPECT_TRUE(c.stride().all_equal(1));
  EXPECT_TRUE(c.padding().all_equal(0));
  EXPECT_TRUE(c.dilation().all_equal(1));
  EXPECT_EQ(c.groups(), 1);
  EXPECT_EQ(F::Conv2dFuncOptions().stride({2, 1}).stride().values(), (std::array<int64_t, 2>{2, 1}));
  const auto b = F::BatchNormFuncOptions();
  EXPECT_FALSE(b.training());
  EXPECT_DOUBLE_EQ(b.momentum(), 0.1);
  EXPECT_DOUBLE_EQ(b.eps(), 1e-5);
  EXPECT_EQ(F::LayerNormFuncOptions({4, 5}).normalized_shape(), (std::vector<int64_t>{4, 5}));
  EXPECT_DOUBLE_EQ(F::LayerNormFuncOptions({4}).eps(), 1e-5);
  const auto n = F::NormalizeFuncOptions();
  EXPECT_DOUBLE_EQ(n.p(), 2.0);
  EXPECT_EQ(n.dim(), 1);
  EXPECT_DOUBLE_EQ(n.eps(), 1e-12);
  EXPECT_FALSE(F::EmbeddingFuncOptions().padding_idx().has_value());
  EXPECT_DOUBLE_EQ(F::PadFuncOptions({1, 1}).value(), 0.0);
  EXPECT_EQ(F::CrossEntropyFuncOptions().ignore_index(), -100);
  EXPECT_EQ(F::CrossEntropyFuncOptions().ignore_index(-1).ignore_index(), -1);
  EXPECT_EQ(F::MaxPool2dFuncOptions(2).stride().values(), (std::array<int64_t, 2>{2, 2}));  // stride defaults to the kernel
}

// ---- the functions written with dp ops, against PyTorch ----
Tensor run_golden(const std::string& fn, const Tensor& x, const json& a) {
  if (fn == "leaky_relu") return F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(a.at("negative_slope").get<double>()));
  if (fn == "normalize") {
    const double p = a.at("p").is_string() ? INFINITY : a.at("p").get<double>();
    return F::normalize(x, F::NormalizeFuncOptions().p(p).dim(a.at("dim").get<int64_t>()).eps(a.at("eps").get<double>()));
  }
  if (fn == "pad") return F::pad(x, F::PadFuncOptions(a.at("pad").get<std::vector<int64_t>>()).value(a.at("value").get<double>()));
  throw std::runtime_error("no function " + fn);
}

TEST(Functional, ComposedFunctionsMatchPyTorch) {
  int checked = 0;
  for (const json& c : test::golden_file("functional.json").at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string fn = name.substr(0, name.find('|'));
    const bool grad = c.contains("grads");
    const Tensor x = tensor_from_json(c.at("inputs")[0], grad);
    const Tensor out = run_golden(fn, x, c.at("args"));
    const Tensor want = tensor_from_json(c.at("output"));
    ASSERT_EQ(out.dtype(), want.dtype()) << name;
    EXPECT_TRUE(all_close(out, want, 1e-5, 1e-6)) << name;
    if (grad) {
      out.backward(tensor_from_json(c.at("grad_output")));
      EXPECT_TRUE(all_close(x.grad(), c.at("grads")[0], 1e-7, 1e-9)) << name;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

TEST(Functional, ComposedFunctionsPassGradcheck) {
  manual_seed(8);
  const Tensor x = randn({3, 4}, kFloat64).set_requires_grad(true);
  EXPECT_TRUE(
      autograd::gradcheck([](const std::vector<Tensor>& in) { return F::leaky_relu(in[0], F::LeakyReLUFuncOptions().negative_slope(0.3)); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return F::normalize(in[0], F::NormalizeFuncOptions().p(3.0).dim(0)); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return F::pad(in[0], F::PadFuncOptions({1, -1, 0, 2}).value(2.0)); }, {x}));
}

TEST(Functional, ComposedFunctionsRejectBadInput) {
  const Tensor i = zeros({2, 3}, kInt64), x = zeros({2, 3});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message([&] { F::leaky_relu(i); }).find("leaky_relu"), std::string::npos);
  EXPECT_NE(message([&] { F::normalize(i); }).find("normalize"), std::string::npos);
  EXPECT_NE(message([&] { F::normalize(x, F::NormalizeFuncOptions().p(0)); }).find("p must be positive"), std::string::npos);
  EXPECT_THROW(F::normalize(x, F::NormalizeFuncOptions().dim(2)), IndexError);
  EXPECT_NE(message([&] { F::pad(x, F::PadFuncOptions({1})); }).find("divisible by 2"), std::string::npos);
  EXPECT_NE(message([&] { F::pad(x, F::PadFuncOptions({1, 1, 1, 1, 1, 1})); }).find("too large"), std::string::npos);
  const std::string neg = message([&] { F::pad(x, F::PadFuncOptions({-2, -2})); });
  EXPECT_NE(neg.find("negative output size"), std::string::npos) << neg;
  EXPECT_NE(neg.find("[2, 3]"), std::string::npos) << neg;
}

// libtorch's examples/cpp/mnist/mnist.cpp Net, with forward() written against F:: ...
struct FunctionalNet : nn::Module {
  FunctionalNet()
      : conv1(nn::Conv2dOptions(1, 10, /*kernel_size=*/5)), conv2(nn::Conv2dOptions(10, 20, /*kernel_size=*/5)), fc1(320, 50), fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  Tensor forward(Tensor x) {
    namespace F = dp::nn::functional;
    x = F::relu(F::max_pool2d(conv1->forward(x), F::MaxPool2dFuncOptions(2)));
    x = F::relu(F::max_pool2d(conv2_drop->forward(conv2->forward(x)), F::MaxPool2dFuncOptions(2)));
    x = x.view({-1, 320});
    x = F::relu(fc1->forward(x));
    x = F::dropout(x, F::DropoutFuncOptions().p(0.5).training(is_training()));
    x = fc2->forward(x);
    return F::log_softmax(x, F::LogSoftmaxFuncOptions(/*dim=*/1));
  }

  // ... and the original's torch:: calls: a bare int for the pooling size and the dim.
  Tensor forward_ops(Tensor x) {
    x = dp::relu(dp::max_pool2d(conv1->forward(x), 2));
    x = dp::relu(dp::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = dp::relu(fc1->forward(x));
    x = dp::dropout(x, /*p=*/0.5, /*training=*/is_training());
    x = fc2->forward(x);
    return dp::log_softmax(x, /*dim=*/1);
  }

  nn::Conv2d conv1;
  nn::Conv2d conv2;
  nn::Dropout2d conv2_drop;
  nn::Linear fc1;
  nn::Linear fc2;
};

TEST(Functional, MnistNetForwardWrittenWithFRunsAndTrains) {
  manual_seed(9);
  FunctionalNet net;
  const Tensor images = randn({8, 1, 28, 28});
  const Tensor labels = randint(0, 10, {8});
  // Eval: no dropout, so the F:: forward and the dp:: forward are the same computation.
  net.eval();
  const Tensor out = net.forward(images);
  EXPECT_EQ(out.sizes(), (Shape{8, 10}));
  EXPECT_TRUE(equal(out, net.forward_ops(images)));
  EXPECT_TRUE(allclose(out.exp().sum(1), ones({8}), 1e-5, 1e-5));  // log-probabilities
  // Training: the same random draws give the same result through both spellings.
  net.train();
  manual_seed(10);
  const Tensor a = net.forward(images);
  manual_seed(10);
  const Tensor b = net.forward_ops(images);
  EXPECT_TRUE(equal(a, b));
  // A few SGD steps on one batch lower its loss: the gradients flow through every F:: call.
  const double lr = 0.05;
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    for (auto& p : net.parameters()) p.mutable_grad() = Tensor();
    net.eval();  // deterministic forward, so the loss decrease is not dropout noise
    Tensor loss = F::nll_loss(net.forward(images), labels);
    loss.backward();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    NoGradGuard no_grad;
    for (auto& p : net.parameters()) {
      ASSERT_TRUE(p.grad().defined());
      p.sub_(p.grad() * lr);
    }
  }
  EXPECT_LT(last, first);
}

}  // namespace
}  // namespace dp
