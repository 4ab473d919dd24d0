// Loss ops: result shapes and dtypes, behaviour PyTorch defines at the edges (extreme values,
// ignored targets, empty inputs, broadcast weights), and the errors for bad arguments (each naming
// the op and what was wrong).
#include <gtest/gtest.h>
#include <cmath>
#include <string>
#include "dp/ops/loss.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;

// Runs f, expecting an exception of type E whose message contains every one of `parts`.
template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message \"" << msg << "\" lacks \"" << p << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

Tensor idx(std::vector<int64_t> v, Shape shape) { return tensor<int64_t>(v, shape); }

TEST(Loss, ReductionNames) {
  EXPECT_STREQ(reduction_name(Reduction::None), "none");
  EXPECT_STREQ(reduction_name(Reduction::Mean), "mean");
  EXPECT_STREQ(reduction_name(Reduction::Sum), "sum");
}

TEST(Loss, ResultShapesAndDtypes) {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = rand({3, 4}, dt), t = rand({3, 4}, dt);
    for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
      EXPECT_EQ(mse_loss(x, t, r).dim(), 0);
      EXPECT_EQ(l1_loss(x, t, r).dtype(), dt);
      EXPECT_EQ(binary_cross_entropy(x, t, {}, r).dim(), 0);
      EXPECT_EQ(binary_cross_entropy_with_logits(x, t, {}, {}, r).dim(), 0);
      EXPECT_EQ(nll_loss(x, idx({0, 1, 2}, {3}), {}, -100, r).dim(), 0);
      EXPECT_EQ(cross_entropy(x, idx({0, 1, 2}, {3}), {}, -100, r).dtype(), dt);
      EXPECT_EQ(cross_entropy(x, t, {}, -100, r).dim(), 0);
    }
    EXPECT_EQ(mse_loss(x, t, Reduction::None).sizes(), Shape({3, 4}));
    EXPECT_EQ(nll_loss(x, idx({0, 1, 2}, {3}), {}, -100, Reduction::None).sizes(), Shape({3}));
    EXPECT_EQ(cross_entropy(rand({2, 4, 5, 6}, dt), randint(0, 4, {2, 5, 6}), {}, -100, Reduction::None).sizes(), Shape({2, 5, 6}));
    EXPECT_EQ(cross_entropy(rand({2, 4, 5, 6}, dt), rand({2, 4, 5, 6}, dt), {}, -100, Reduction::None).sizes(), Shape({2, 5, 6}));
    EXPECT_EQ(cross_entropy(rand({4}, dt), idx({2}, {}), {}, -100, Reduction::None).dim(), 0);
  }
}

TEST(Loss, DefaultsAreMeanAndIgnoreMinus100) {
  Tensor x = randn({4, 3});
  Tensor t = idx({0, -100, 2, 1}, {4});
  EXPECT_TRUE(all_close(cross_entropy(x, t), cross_entropy(x, t, {}, -100, Reduction::Mean, 0.0), 0, 0));
  EXPECT_TRUE(all_close(nll_loss(x, t), nll_loss(x, t, {}, -100, Reduction::Mean), 0, 0));
  Tensor a = randn({5}), b = randn({5});
  EXPECT_TRUE(all_close(mse_loss(a, b), mse_loss(a, b, Reduction::Mean), 0, 0));
}

// cross_entropy == nll_loss(log_softmax) and the label-smoothing formula from its parts.
TEST(Loss, CrossEntropyIsLogSoftmaxPlusNll) {
  Tensor x = randn({7, 6}, kFloat64) * 3.0;
  Tensor t = idx({0, 5, -100, 2, 3, 3, 1}, {7});
  Tensor w = rand({6}, kFloat64) + 0.1;
  Tensor lp = log_softmax(x, 1);
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum})
    EXPECT_TRUE(all_close(cross_entropy(x, t, w, -100, r), nll_loss(lp, t, w, -100, r), 1e-12, 1e-14));
  // Label smoothing: (1 - ls) * nll + ls / C * sum_c w_c * (-lp_c), per sample, mean over sum w[t].
  const double ls = 0.3;
  Tensor per = cross_entropy(x, t, w, -100, Reduction::None, ls);
  std::vector<double> lpv = lp.to_vector<double>(), wv = w.to_vector<double>(), pv = per.to_vector<double>();
  std::vector<int64_t> tv = t.to_vector<int64_t>();
  double num = 0, den = 0;
  for (int i = 0; i < 7; ++i) {
    if (tv[i] == -100) {
      EXPECT_EQ(pv[i], 0.0);
      continue;
    }
    double smooth = 0;
    for (int c = 0; c < 6; ++c) smooth -= wv[c] * lpv[i * 6 + c];
    const double expect = (1 - ls) * -wv[tv[i]] * lpv[i * 6 + tv[i]] + ls / 6 * smooth;
    EXPECT_NEAR(pv[i], expect, 1e-12);
    num += expect;
    den += wv[tv[i]];
  }
  EXPECT_NEAR(cross_entropy(x, t, w, -100, Reduction::Mean, ls).item<double>(), num / den, 1e-12);
}

TEST(Loss, CrossEntropyOneHotProbabilitiesEqualIndices) {
  Tensor x = randn({5, 4}, kFloat64);
  Tensor t = idx({0, 3, 1, 1, 2}, {5});
  Tensor oh = one_hot(t, 4).to(kFloat64);
  Tensor w = rand({4}, kFloat64) + 0.5;
  EXPECT_TRUE(all_close(cross_entropy(x, oh, {}, -100, Reduction::Sum, 0.2), cross_entropy(x, t, {}, -100, Reduction::Sum, 0.2), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(cross_entropy(x, oh, w, -100, Reduction::None), cross_entropy(x, t, w, -100, Reduction::None), 1e-12, 1e-12));
}

TEST(Loss, ExtremeValues) {
  // BCE at exactly 0 and 1: each log is clamped at -100.
  Tensor x = tensor<float>({0, 1, 0, 1}, {4});
  Tensor t = tensor<float>({1, 0, 0, 1}, {4});
  std::vector<double> v = binary_cross_entropy(x, t, {}, Reduction::None).to_vector<double>();
  EXPECT_EQ(v[0], 100.0);
  EXPECT_EQ(v[1], 100.0);
  EXPECT_EQ(v[2], 0.0);
  EXPECT_EQ(v[3], 0.0);
  // Logits far beyond float's exp range stay finite and exact.
  Tensor z = tensor<float>({1e4f, -1e4f, 1e4f, -1e4f, 30.f}, {5});
  Tensor y = tensor<float>({1, 0, 0, 1, 1}, {5});
  std::vector<double> b = binary_cross_entropy_with_logits(z, y, {}, {}, Reduction::None).to_vector<double>();
  EXPECT_EQ(b[0], 0.0);
  EXPECT_EQ(b[1], 0.0);
  EXPECT_EQ(b[2], 1e4);
  EXPECT_EQ(b[3], 1e4);
  EXPECT_NEAR(b[4], std::exp(-30.0), 1e-6 * std::exp(-30.0));  // log1p(e^-30), not log(1 + e^-30) = 0
  // cross_entropy subtracts the row max: huge logits are fine.
  Tensor big = tensor<float>({1e30f, 0.f, -1e30f, 50.f, 60.f, 70.f}, {2, 3});
  std::vector<double> c = cross_entropy(big, idx({0, 2}, {2}), {}, -100, Reduction::None).to_vector<double>();
  EXPECT_EQ(c[0], 0.0);
  EXPECT_NEAR(c[1], std::log1p(std::exp(-10.0) + std::exp(-20.0)), 1e-6);
  Tensor xg = big.detach().requires_grad_(true);
  cross_entropy(xg, idx({0, 2}, {2})).backward();
  for (double g : xg.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(g));
}

TEST(Loss, IgnoredTargetsGetNoGradient) {
  Tensor x = randn({4, 5}).requires_grad_(true);
  Tensor t = idx({1, -100, 3, -100}, {4});
  cross_entropy(x, t, {}, -100, Reduction::Mean, 0.1).backward();
  std::vector<double> g = x.grad().to_vector<double>();
  for (int c = 0; c < 5; ++c) {
    EXPECT_EQ(g[1 * 5 + c], 0.0);
    EXPECT_EQ(g[3 * 5 + c], 0.0);
  }
  // Rows of the softmax gradient sum to 0.
  double s = 0;
  for (int c = 0; c < 5; ++c) s += g[c];
  EXPECT_NEAR(s, 0.0, 1e-6);
}

TEST(Loss, AllIgnoredMeanIsNan) {
  Tensor x = randn({3, 4});
  Tensor t = idx({-100, -100, -100}, {3});
  EXPECT_TRUE(std::isnan(nll_loss(x, t).item<double>()));
  EXPECT_TRUE(std::isnan(cross_entropy(x, t, {}, -100, Reduction::Mean, 0.1).item<double>()));
  EXPECT_EQ(cross_entropy(x, t, {}, -100, Reduction::Sum, 0.1).item<double>(), 0.0);
}

TEST(Loss, WeightBroadcasting) {
  Tensor x = rand({2, 3, 4}, kFloat64) * 0.9 + 0.05, t = rand({2, 3, 4}, kFloat64);
  Tensor w = rand({3, 1}, kFloat64);
  // Against an explicitly expanded weight.
  Tensor we = w.expand({2, 3, 4}).contiguous();
  EXPECT_TRUE(all_close(binary_cross_entropy(x, t, w, Reduction::None), binary_cross_entropy(x, t, we, Reduction::None), 1e-15, 0));
  Tensor pw = rand({4}, kFloat64) * 2.0;
  Tensor pwe = pw.expand({2, 3, 4}).contiguous();
  EXPECT_TRUE(all_close(binary_cross_entropy_with_logits(x, t, w, pw, Reduction::None),
                        binary_cross_entropy_with_logits(x, t, we, pwe, Reduction::None), 1e-15, 0));
  // A non-contiguous weight.
  Tensor wt = rand({4, 3}, kFloat64).t();
  EXPECT_TRUE(all_close(binary_cross_entropy_with_logits(x, t, wt, {}, Reduction::Sum),
                        binary_cross_entropy_with_logits(x, t, wt.contiguous(), {}, Reduction::Sum), 1e-14, 0));
}

TEST(Loss, ConstantWeightsUnderNoGrad) {
  Tensor w = rand({4}).requires_grad_(true);
  NoGradGuard no_grad;
  EXPECT_NO_THROW(cross_entropy(randn({2, 4}), idx({0, 1}, {2}), w));
}

// ---- errors ----

TEST(LossErrors, ShapeMismatch) {
  Tensor a = rand({2, 3}), b = rand({3});
  expect_error<ShapeError>([&] { mse_loss(a, b); }, {"mse_loss", "[3]", "[2, 3]"});
  expect_error<ShapeError>([&] { l1_loss(a, rand({2, 1})); }, {"l1_loss", "same size"});
  expect_error<ShapeError>([&] { binary_cross_entropy(a, b); }, {"binary_cross_entropy", "Using a target size ([3])", "input size ([2, 3])"});
  expect_error<ShapeError>([&] { binary_cross_entropy_with_logits(a, b); }, {"Target size ([3]) must be the same as input size ([2, 3])"});
  expect_error<ShapeError>([&] { binary_cross_entropy(a, a, rand({2, 2})); }, {"weight", "[2, 2]"});
  expect_error<ShapeError>([&] { binary_cross_entropy(a, a, rand({4, 2, 3})); }, {"does not broadcast", "[4, 2, 3]"});
  expect_error<ShapeError>([&] { binary_cross_entropy_with_logits(a, a, {}, rand({2})); }, {"pos_weight"});
}

TEST(LossErrors, ProbabilitiesOutsideZeroOne) {
  expect_error<ValueError>([] { binary_cross_entropy(tensor<float>({0.5f, 1.5f}, {2}), rand({2})); }, {"binary_cross_entropy", "between 0 and 1"});
  expect_error<ValueError>([] { binary_cross_entropy(tensor<double>({-1e-9}, {1}), rand({1}, kFloat64)); }, {"between 0 and 1"});
  expect_error<ValueError>([] { binary_cross_entropy(tensor<float>({std::nanf("")}, {1}), rand({1}), {}, Reduction::None); }, {"between 0 and 1"});
}

TEST(LossErrors, Dtypes) {
  expect_error<DTypeError>([] { mse_loss(randint(0, 3, {3}), randint(0, 3, {3})); }, {"mse_loss", "Long"});
  expect_error<DTypeError>([] { mse_loss(rand({3}), rand({3}, kFloat64)); }, {"mse_loss", "target", "float64", "float32"});
  expect_error<DTypeError>([] { binary_cross_entropy(rand({3}), rand({3}), rand({3}, kFloat64)); }, {"weight", "float64"});
  expect_error<DTypeError>([] { nll_loss(randn({2, 3}), tensor<float>({0, 1}, {2})); }, {"nll_loss", "expected scalar type Long but found Float"});
  expect_error<DTypeError>([] { nll_loss(randn({2, 3}), tensor<int32_t>({0, 1}, {2})); }, {"expected scalar type Long but found Int"});
  expect_error<DTypeError>([] { cross_entropy(randn({2, 3}), tensor<float>({0, 1}, {2})); }, {"cross_entropy", "Long", "Float"});
  expect_error<DTypeError>(
      [] {
        cross_entropy(randn({2, 3}), randint(0, 3, {2, 3}));
      },
      {"Expected floating point type for target with class probabilities, got Long"});
  expect_error<DTypeError>([] { cross_entropy(randn({2, 3}), idx({0, 1}, {2}), rand({3}, kFloat64)); }, {"weight"});
  expect_error<DTypeError>([] { cross_entropy(randn({2, 3}).to(kFloat16), idx({0, 1}, {2})); }, {"cross_entropy", "Half"});
}

TEST(LossErrors, TargetOutOfRange) {
  expect_error<IndexError>([] { nll_loss(randn({2, 3}), idx({0, 5}, {2})); }, {"nll_loss", "Target 5 is out of bounds", "[0, 3)"});
  expect_error<IndexError>([] { nll_loss(randn({2, 3}), idx({-1, 0}, {2})); }, {"Target -1 is out of bounds"});
  expect_error<IndexError>([] { cross_entropy(randn({2, 3}), idx({3, 0}, {2})); }, {"cross_entropy", "Target 3", "[0, 3)"});
  expect_error<IndexError>([] { cross_entropy(randn({2, 3, 4}), idx({0, 1, 2, 0, 1, 7, 0, 0}, {2, 4})); }, {"Target 7"});
  expect_error<IndexError>([] { cross_entropy(randn({2, 3}), idx({1, 4}, {2}), {}, -100, Reduction::Mean, 0.1); }, {"Target 4"});
  // ignore_index may be any value, in range or not.
  EXPECT_NO_THROW(nll_loss(randn({2, 3}), idx({0, 5}, {2}), {}, 5));
  EXPECT_NO_THROW(cross_entropy(randn({2, 3}), idx({0, -1}, {2}), {}, -1));
}

TEST(LossErrors, ClassShapes) {
  expect_error<ShapeError>([] { nll_loss(randn({2, 3}), idx({0, 1, 1}, {3})); }, {"Expected input batch_size (2) to match target batch_size (3)"});
  expect_error<ShapeError>([] { nll_loss(randn({2, 3, 4}), idx({0, 1, 1, 0, 1, 1}, {2, 3})); }, {"Expected target size [2, 4], got [2, 3]"});
  expect_error<ShapeError>([] { cross_entropy(randn({2, 3}), idx({0, 1, 1, 0}, {2, 2})); }, {"Expected target size [2], got [2, 2]"});
  expect_error<ShapeError>([] { nll_loss(randn({3}), idx({1}, {1})); }, {"size mismatch"});
  expect_error<ShapeError>([] { nll_loss(scalar_tensor(1.0), idx({0}, {})); }, {"Expected 1 or more dimensions (got 0)"});
  expect_error<ShapeError>(
      [] {
        nll_loss(randn({2, 3}), idx({0, 1}, {2}), rand({2}));
      },
      {"weight tensor should be defined either for all 3 classes or no classes but got weight tensor of shape: [2]"});
  expect_error<ShapeError>([] { cross_entropy(randn({2, 3}), idx({0, 1}, {2}), rand({1, 3})); }, {"weight tensor"});
}

TEST(LossErrors, LabelSmoothingAndIgnoreIndex) {
  expect_error<ValueError>(
      [] {
        cross_entropy(randn({2, 3}), idx({0, 1}, {2}), {}, -100, Reduction::Mean, 1.5);
      },
      {"label_smoothing must be between 0.0 and 1.0. Got: 1.5"});
  expect_error<ValueError>([] { cross_entropy(randn({2, 3}), idx({0, 1}, {2}), {}, -100, Reduction::Mean, -0.1); }, {"label_smoothing"});
  expect_error<ValueError>([] { cross_entropy(randn({2, 3}), rand({2, 3}), {}, 1); }, {"ignore_index is not supported for floating point target"});
}

TEST(LossErrors, WeightsThatRequireGrad) {
  Tensor w = rand({3}).requires_grad_(true);
  expect_error<AutogradError>([&] { cross_entropy(randn({2, 3}), idx({0, 1}, {2}), w); }, {"cross_entropy", "'weight'"});
  expect_error<AutogradError>([&] { nll_loss(randn({2, 3}), idx({0, 1}, {2}), w); }, {"nll_loss", "not differentiable"});
  expect_error<AutogradError>([&] { binary_cross_entropy(rand({2, 3}), rand({2, 3}), w); }, {"'weight'"});
  expect_error<AutogradError>([&] { binary_cross_entropy_with_logits(rand({2, 3}), rand({2, 3}), {}, w); }, {"'pos_weight'"});
}

TEST(LossErrors, UndefinedArguments) {
  expect_error<ValueError>([] { mse_loss(Tensor(), rand({2})); }, {"mse_loss", "undefined"});
  expect_error<ValueError>([] { cross_entropy(rand({2, 3}), Tensor()); }, {"cross_entropy", "target", "undefined"});
}

TEST(LossErrors, InPlaceChangeBeforeBackward) {
  Tensor x = randn({3, 4}).requires_grad_(true);
  Tensor t = randn({3, 4});
  Tensor l = mse_loss(x, t);
  t.add_(1.0);
  EXPECT_THROW(l.backward(), AutogradError);
}

}  // namespace
}  // namespace dp
