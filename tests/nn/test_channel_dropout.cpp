// Channel-wise dropout: the Dropout2d and FeatureDropout modules and the feature_dropout op. In
// training whole channels are zeroed with probability p and the others scaled by 1 / (1 - p)
// (fraction, whole channels, scaling), eval() is the identity, gradients flow through the same
// mask, and bad input is an error naming the problem.
#include <gtest/gtest.h>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp::nn {
namespace {

using test::all_close;

struct ChannelStats {
  double zeroed_fraction = 0;
  bool whole_channels = true;  // every channel all zero or all kept
  bool scaled = true;          // every kept channel equals input / (1 - p)
};

// `channels` = the leading dims that index a channel ([N, C] of [N, C, H, W], [C] of [C, H, W]).
ChannelStats channel_stats(const Tensor& x, const Tensor& y, double p, int64_t leading) {
  const int64_t channels = x.flatten(0, leading - 1).size(0);
  Tensor xs = x.reshape({channels, -1}).to(kFloat64);
  Tensor ys = y.detach().reshape({channels, -1}).to(kFloat64);
  // PyTorch's kept value: x * (1 / (1 - p) rounded in x's dtype).
  const double scale = x.dtype() == kFloat32 ? static_cast<double>(1.0f / static_cast<float>(1.0 - p)) : 1.0 / (1.0 - p);
  ChannelStats s;
  int64_t zeroed = 0;
  for (int64_t c = 0; c < channels; ++c) {
    Tensor yc = ys[c];
    const int64_t zeros_n = yc.eq(0.0).sum().item<int64_t>();
    if (zeros_n == yc.numel()) {
      ++zeroed;
      continue;
    }
    s.whole_channels = s.whole_channels && zeros_n == 0;
    s.scaled = s.scaled && allclose(yc, xs[c] * scale, 1e-6, 0);
  }
  s.zeroed_fraction = static_cast<double>(zeroed) / static_cast<double>(channels);
  return s;
}

TEST(Dropout2d, ZeroesWholeChannelsOfBatchedInputsAndScalesTheRest) {
  manual_seed(11);
  Tensor x = rand({50, 40, 3, 5}) + 0.5;  // no zero in the input: a zero in the output was dropped
  for (double p : {0.2, 0.5, 0.7}) {
    SCOPED_TRACE(p);
    Dropout2d drop(p);
    Tensor y = drop(x);
    EXPECT_EQ(y.sizes(), x.sizes());
    ChannelStats s = channel_stats(x, y, p, 2);
    // 2000 channels: the standard deviation of the fraction is at most 0.0112.
    EXPECT_NEAR(s.zeroed_fraction, p, 0.05);
    EXPECT_TRUE(s.whole_channels);
    EXPECT_TRUE(s.scaled);
  }
}

TEST(Dropout2d, ThreeDimensionalInputIsOneSampleOfChannels) {
  manual_seed(12);
  Tensor x = rand({400, 4, 6}) + 0.5;  // [C, H, W]
  Dropout2d drop(0.4);
  Tensor y = drop(x);
  EXPECT_EQ(y.sizes(), x.sizes());
  ChannelStats s = channel_stats(x, y, 0.4, 1);  // a channel is x[c], 24 elements
  EXPECT_NEAR(s.zeroed_fraction, 0.4, 0.08);     // 400 channels: sd 0.0245
  EXPECT_TRUE(s.whole_channels);
  EXPECT_TRUE(s.scaled);
  // In place: the same kind of result, written into the input.
  Tensor z = x.clone();
  Dropout2d inplace(Dropout2dOptions(0.4).inplace(true));
  Tensor out = inplace(z);
  EXPECT_TRUE(out.is_same(z));
  ChannelStats si = channel_stats(x, z, 0.4, 1);
  EXPECT_NEAR(si.zeroed_fraction, 0.4, 0.08);
  EXPECT_TRUE(si.whole_channels);
  EXPECT_TRUE(si.scaled);
}

TEST(Dropout2d, EvalIsTheIdentityAndTrainingCanBeResumed) {
  Tensor x = randn({4, 3, 2, 2});
  Dropout2d drop(0.5);
  drop->eval();
  EXPECT_TRUE(drop(x).is_same(x));
  Tensor x0 = x[0];  // [C, H, W]
  EXPECT_TRUE(drop(x0).is_same(x0));
  drop->train();
  manual_seed(1);
  Tensor y = drop(ones({64, 8, 2, 2}));
  EXPECT_GT(y.eq(0.0).sum().item<int64_t>(), 0);
  // p = 0 returns the input; p = 1 zeroes everything.
  EXPECT_TRUE(Dropout2d(0.0)(x).is_same(x));
  EXPECT_TRUE(equal(Dropout2d(1.0)(x), zeros_like(x)));
}

TEST(Dropout2d, GradientFlowsThroughTheSameMask) {
  manual_seed(13);
  for (int64_t dims : {3, 4}) {
    SCOPED_TRACE(dims);
    Tensor x = (dims == 4 ? rand({6, 10, 3, 3}) : rand({10, 3, 3})).add(0.5).requires_grad_(true);
    Dropout2d drop(0.3);
    Tensor y = drop(x);
    Tensor g = rand(y.sizes());
    y.backward(g);
    ASSERT_TRUE(x.grad().defined());
    // y = x * noise, so the gradient is g * noise = g * y / x exactly where kept, 0 where dropped.
    Tensor noise = y.detach() / x.detach();
    EXPECT_TRUE(all_close(x.grad(), g * noise, 1e-6, 0));
    EXPECT_GT(x.grad().eq(0.0).sum().item<int64_t>(), 0);
  }
}

TEST(Dropout2d, FiniteDifferenceGradientsWithAFixedMask) {
  // A freshly seeded generator per evaluation: the same mask each time, a fixed linear map.
  auto f = [](const std::vector<Tensor>& in) {
    Generator gen(21);
    return feature_dropout(in[0], 0.4, true, &gen);
  };
  Tensor x = test::rand_leaf({3, 5, 2, 2});
  EXPECT_TRUE(test::gradcheck(f, {x}));
  EXPECT_TRUE(test::gradgradcheck(f, {x}));
}

TEST(Dropout2d, BadInputIsAnError) {
  EXPECT_THROW(Dropout2d(1.5), ValueError);
  EXPECT_THROW(Dropout2d(-0.1), ValueError);
  Dropout2d drop(0.5);
  try {
    drop(ones({4, 5}));
    FAIL() << "expected a rank error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("2-D input of shape [4, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(drop(ones({1, 2, 3, 4, 5})), ShapeError);
  EXPECT_THROW(drop(ones({2, 3, 4}, kInt64)), DTypeError);
  EXPECT_THROW(Dropout2d(Dropout2dOptions(0.5).inplace(true))(ones({2, 3, 4}, kInt64)), DTypeError);
  // In place on a leaf that requires grad is refused, as for every in-place op.
  Tensor leaf = ones({2, 3, 4}, TensorOptions().requires_grad());
  EXPECT_THROW(Dropout2d(Dropout2dOptions(0.5).inplace(true))(leaf), AutogradError);
}

TEST(Dropout2d, Printing) {
  // PyTorch: repr(nn.Dropout2d(0.3)), repr(nn.Dropout2d(0.5, inplace=True)).
  EXPECT_EQ(Dropout2d(0.3)->to_string(), "Dropout2d(p=0.3, inplace=False)");
  EXPECT_EQ(Dropout2d(Dropout2dOptions(0.5).inplace(true))->to_string(), "Dropout2d(p=0.5, inplace=True)");
  EXPECT_EQ(FeatureDropout()->to_string(), "FeatureDropout(p=0.5, inplace=False)");
}

TEST(FeatureDropout, ZeroesEachSampleChannelOfAnyRank) {
  manual_seed(14);
  // [N, C, L]: PyTorch 1.13's nn.Dropout2d on a 3-D input; a channel is x[n, c].
  Tensor x = rand({40, 30, 7}) + 0.5;
  FeatureDropout drop(0.25);
  Tensor y = drop(x);
  ChannelStats s = channel_stats(x, y, 0.25, 2);
  EXPECT_NEAR(s.zeroed_fraction, 0.25, 0.05);  // 1200 channels: sd 0.0125
  EXPECT_TRUE(s.whole_channels);
  EXPECT_TRUE(s.scaled);
  // [N, C]: every element is its own channel; [N, C, D, H, W] too.
  Tensor x2 = rand({100, 50}, kFloat64) + 0.5;
  ChannelStats s2 = channel_stats(x2, drop(x2), 0.25, 2);
  EXPECT_NEAR(s2.zeroed_fraction, 0.25, 0.05);
  EXPECT_TRUE(s2.scaled);
  Tensor x5 = rand({8, 20, 2, 2, 2}) + 0.5;
  ChannelStats s5 = channel_stats(x5, drop(x5), 0.25, 2);
  EXPECT_TRUE(s5.whole_channels);
  EXPECT_TRUE(s5.scaled);
  // eval(): the identity.
  drop->eval();
  EXPECT_TRUE(drop(x).is_same(x));
  // In place, and the gradient of the out-of-place form.
  drop->train();
  Tensor z = x.clone();
  FeatureDropout inplace(FeatureDropoutOptions(0.25).inplace(true));
  EXPECT_TRUE(inplace(z).is_same(z));
  EXPECT_TRUE(channel_stats(x, z, 0.25, 2).whole_channels);
  Tensor leaf = x.clone().requires_grad_(true);
  Tensor out = drop(leaf);
  out.sum().backward();
  EXPECT_TRUE(all_close(leaf.grad(), out.detach() / x, 1e-6, 0));
}

TEST(FeatureDropout, OpsReproducibleFromASeedAndErrors) {
  Tensor x = rand({10, 20, 3});
  Generator a(5), b(5);
  EXPECT_TRUE(equal(feature_dropout(x, 0.5, true, &a), feature_dropout(x, 0.5, true, &b)));
  manual_seed(8);
  Tensor y1 = FeatureDropout(0.5)(x);
  manual_seed(8);
  Tensor y2 = FeatureDropout(0.5)(x);
  EXPECT_TRUE(equal(y1, y2));
  try {
    feature_dropout(ones({3}), 0.5);
    FAIL() << "expected a rank error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("Feature dropout requires at least 2 dimensions in the input"), std::string::npos) << e.what();
  }
  EXPECT_THROW(feature_dropout(ones({2, 2}), 1.01), ValueError);
  EXPECT_THROW(FeatureDropout(2.0), ValueError);
  Tensor empty_in = ones({0, 3});
  EXPECT_TRUE(feature_dropout(empty_in, 0.5).is_same(empty_in));
  Tensor z = ones({4, 3});
  feature_dropout_(z, 1.0);
  EXPECT_TRUE(equal(z, zeros({4, 3})));
}

}  // namespace
}  // namespace dp::nn
