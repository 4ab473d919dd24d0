// Conv2d / MaxPool2d / AvgPool2d / AdaptiveAvgPool2d modules: PyTorch's printed form and
// state_dict keys (tests/golden/gen_conv.py), default initialisation bounds and statistics,
// forward equal to the functional ops, options, clone, errors.
#include <gtest/gtest.h>
#include <cmath>
#include <string>
#include "dp/nn/modules/conv.h"
#include "dp/nn/modules/linear.h"
#include "dp/nn/modules/pooling.h"
#include "dp/ops/conv.h"
#include "dp/ops/pooling.h"
#include "support/golden.h"

namespace dp::nn {
namespace {

using test::golden_case;

constexpr const char* kFile = "conv.json";

void expect_like_pytorch(const Module& m, const std::string& name) {
  const test::json& c = golden_case(kFile, name);
  EXPECT_EQ(m.to_string(), c.at("repr").get<std::string>()) << name;
  TensorDict sd = m.state_dict();
  std::vector<std::string> keys;
  std::vector<Shape> shapes;
  for (const auto& item : sd) {
    keys.push_back(item.key());
    shapes.push_back(item.value().sizes());
  }
  EXPECT_EQ(keys, c.at("keys").get<std::vector<std::string>>()) << name;
  EXPECT_EQ(shapes, c.at("shapes").get<std::vector<Shape>>()) << name;
}

TEST(ConvModules, PrintAndStateDictLikePyTorch) {
  expect_like_pytorch(*Conv2d(Conv2dOptions(1, 32, 3).padding(1)), "mod_conv_pad1");
  expect_like_pytorch(*Conv2d(3, 8, 3), "mod_conv_default");
  expect_like_pytorch(*Conv2d(Conv2dOptions(3, 8, {3, 5}).stride(2).padding({1, 2}).dilation(2).bias(false)), "mod_conv_full");
  expect_like_pytorch(*Conv2d(Conv2dOptions(4, 8, 3).groups(2)), "mod_conv_groups");
  expect_like_pytorch(*Conv2d(Conv2dOptions(16, 16, 3).stride({2, 1}).padding(1).groups(16)), "mod_conv_depthwise");
  expect_like_pytorch(*Conv2d(Conv2dOptions(2, 2, 1).dilation({1, 2})), "mod_conv_dilation_only");
  expect_like_pytorch(*MaxPool2d(2), "mod_maxpool_2");
  expect_like_pytorch(*MaxPool2d(MaxPool2dOptions({2, 3}).stride(1).padding({1, 0}).dilation(2).ceil_mode(true)), "mod_maxpool_full");
  expect_like_pytorch(*MaxPool2d(MaxPool2dOptions(3).stride(2).padding(1)), "mod_maxpool_3_2_1");
  expect_like_pytorch(*AvgPool2d(2), "mod_avgpool_2");
  expect_like_pytorch(*AvgPool2d(AvgPool2dOptions({3, 3}).stride({2, 1}).padding(1).ceil_mode(true).count_include_pad(false).divisor_override(2)),
                      "mod_avgpool_full");
  expect_like_pytorch(*AdaptiveAvgPool2d(1), "mod_adaptive_1");
  expect_like_pytorch(*AdaptiveAvgPool2d(AdaptiveAvgPool2dOptions({2, 3})), "mod_adaptive_2x3");
}

struct Net : Module {
  Conv2d conv1{nullptr}, conv2{nullptr};
  MaxPool2d pool{nullptr};
  AdaptiveAvgPool2d gap{nullptr};
  Linear fc{nullptr};
  Net() {
    conv1 = register_module("conv1", Conv2d(Conv2dOptions(1, 32, 3).padding(1)));
    pool = register_module("pool", MaxPool2d(2));
    conv2 = register_module("conv2", Conv2d(Conv2dOptions(32, 64, 3).padding(1)));
    gap = register_module("gap", AdaptiveAvgPool2d(AdaptiveAvgPool2dOptions({7, 7})));
    fc = register_module("fc", Linear(64 * 7 * 7, 10));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = pool(relu(conv1(x)));
    h = gap(pool(relu(conv2(h))));
    return fc(h.flatten(1));
  }
};

TEST(ConvModules, NetPrintsAndRunsLikePyTorch) {
  auto net = std::make_shared<Net>();
  expect_like_pytorch(*net, "mod_net");
  Tensor x = randn({2, 1, 28, 28});
  Tensor y = net->forward(x);
  EXPECT_EQ(y.sizes(), (Shape{2, 10}));
  y.sum().backward();
  for (const auto& p : net->named_parameters()) EXPECT_TRUE(p.value().grad().defined()) << p.key();
  // A deep copy has its own parameters and computes the same function.
  auto copy = clone(net);
  EXPECT_FALSE(copy->conv1->weight.is_same(net->conv1->weight));
  EXPECT_TRUE(equal(copy->forward(x), net->forward(x)));
}

// PyTorch's default init: kaiming_uniform_(a = sqrt(5)) gives U(-b, b) with b = 1/sqrt(fan_in),
// fan_in = in / groups * kH * kW; the bias is U(-b, b) too.
void check_uniform(const Tensor& t, double bound) {
  std::vector<double> v = t.to_vector<double>();
  double mean = 0, sq = 0, mx = 0;
  for (double e : v) {
    mean += e;
    sq += e * e;
    mx = std::max(mx, std::abs(e));
  }
  mean /= v.size();
  const double var = sq / v.size() - mean * mean;
  const double n = static_cast<double>(v.size());
  EXPECT_LE(mx, bound);
  EXPECT_GT(mx, bound * (1.0 - 20.0 / n));  // the largest of n uniform draws is near the bound
  EXPECT_NEAR(mean, 0.0, 5.0 * bound / std::sqrt(3.0 * n));
  EXPECT_NEAR(var, bound * bound / 3.0, 0.1 * bound * bound / 3.0);
}

TEST(ConvModules, DefaultInitBoundsAndStatistics) {
  manual_seed(7);
  Conv2d c(Conv2dOptions(32, 64, 3).padding(1));
  const double b = 1.0 / std::sqrt(32.0 * 9.0);
  check_uniform(c->weight, b);
  EXPECT_LE(c->bias.abs().max().item<double>(), b);
  Conv2d g(Conv2dOptions(64, 128, {3, 5}).groups(4));
  EXPECT_EQ(g->weight.sizes(), (Shape{128, 16, 3, 5}));
  check_uniform(g->weight, 1.0 / std::sqrt(16.0 * 15.0));
  Conv2d big_bias(Conv2dOptions(2, 4000, 1));
  check_uniform(big_bias->bias, 1.0 / std::sqrt(2.0));
  EXPECT_TRUE(c->weight.requires_grad());
  EXPECT_TRUE(c->weight.is_leaf());
}

TEST(ConvModules, ForwardEqualsFunctional) {
  manual_seed(8);
  Conv2d c(Conv2dOptions(4, 6, {3, 2}).stride({2, 1}).padding({1, 0}).dilation({1, 2}).groups(2));
  Tensor x = randn({2, 4, 9, 8});
  EXPECT_TRUE(equal(c(x), conv2d(x, c->weight, c->bias, {2, 1}, {1, 0}, {1, 2}, 2)));
  Conv2d nb(Conv2dOptions(4, 3, 1).bias(false));
  EXPECT_FALSE(nb->bias.defined());
  EXPECT_EQ(nb->parameters().size(), 1u);
  EXPECT_TRUE(equal(nb(x), conv2d(x, nb->weight)));
  EXPECT_EQ(c(randn({4, 9, 8})).sizes(), (Shape{6, 5, 6}));  // unbatched

  MaxPool2d mp(MaxPool2dOptions(3).stride(2).padding(1).ceil_mode(true));
  EXPECT_TRUE(equal(mp(x), max_pool2d(x, {3}, {2}, {1}, {1}, true)));
  auto [v, idx] = mp->forward_with_indices(x);
  EXPECT_TRUE(equal(v, mp(x)));
  EXPECT_EQ(idx.dtype(), kInt64);
  AvgPool2d ap(AvgPool2dOptions({2, 3}).padding({1, 1}).count_include_pad(false));
  EXPECT_TRUE(equal(ap(x), avg_pool2d(x, {2, 3}, {2, 3}, {1, 1}, false, false)));
  AdaptiveAvgPool2d aap(AdaptiveAvgPool2dOptions({1, 3}));
  EXPECT_TRUE(equal(aap(x), adaptive_avg_pool2d(x, {1, 3})));
  EXPECT_TRUE(mp->parameters().empty());
  EXPECT_EQ(mp->state_dict().size(), 0u);
}

TEST(ConvModules, ToFloat64) {
  Conv2d c(Conv2dOptions(2, 3, 3));
  c->to(kFloat64);
  EXPECT_EQ(c->weight.dtype(), kFloat64);
  EXPECT_EQ(c(randn({1, 2, 4, 4}, kFloat64)).dtype(), kFloat64);
}

TEST(ConvModules, ExpandingArray) {
  ExpandingArray<2> a = 3;
  EXPECT_TRUE(a.is_scalar());
  EXPECT_EQ(a.str(), "3");
  EXPECT_EQ(a.tuple_str(), "(3, 3)");
  ExpandingArray<2> b({2, 5});
  EXPECT_FALSE(b.is_scalar());
  EXPECT_EQ(b[1], 5);
  EXPECT_EQ(b.str(), "(2, 5)");
  IntArrayRef r = b;
  EXPECT_EQ(r.vec(), (Shape{2, 5}));
  EXPECT_THROW(ExpandingArray<2>({1, 2, 3}), ValueError);
}

TEST(ConvModules, Errors) {
  EXPECT_THROW(Conv2d(Conv2dOptions(3, 8, 3).groups(2)), ValueError);  // in_channels not divisible
  EXPECT_THROW(Conv2d(Conv2dOptions(4, 6, 3).groups(4)), ValueError);  // out_channels not divisible
  EXPECT_THROW(Conv2d(Conv2dOptions(4, 8, 3).groups(0)), ValueError);
  EXPECT_THROW(Conv2d(Conv2dOptions(4, 8, 0)), ValueError);
  EXPECT_THROW(Conv2d(Conv2dOptions(4, 8, 3).stride(0)), ValueError);
  Conv2d c(Conv2dOptions(3, 8, 3));
  try {
    c(randn({1, 2, 5, 5}));
    ADD_FAILURE() << "expected a channel mismatch error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("expected input[1, 2, 5, 5] to have 3 channels, but got 2 channels instead"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MaxPool2d(MaxPool2dOptions(2).padding(2))(randn({1, 1, 4, 4})), ValueError);
}

}  // namespace
}  // namespace dp::nn
