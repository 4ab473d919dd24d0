// LayerNorm, BatchNorm1d / BatchNorm2d and Dropout modules: BatchNorm training steps, running
// statistics and eval outputs against PyTorch's modules (tests/golden/gen_normalization.py),
// printing (PyTorch's extra_repr), parameter / buffer names and state_dict keys, input checks,
// train() / eval(), clone and dtype conversion.
#include <gtest/gtest.h>
#include <string>
#include <vector>
#include "dp/nn/modules/batchnorm.h"
#include "dp/nn/modules/container.h"
#include "dp/nn/modules/dropout.h"
#include "dp/nn/modules/linear.h"
#include "dp/nn/modules/normalization.h"
#include "dp/ops/normalization.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;
using test::json;

std::vector<std::string> keys_of(const nn::TensorDict& d) {
  std::vector<std::string> out;
  for (const auto& item : d) out.push_back(item.key());
  return out;
}

// ---------------------------------------------------------------- BatchNorm against PyTorch

void run_module_case(const json& c) {
  const json& a = c.at("args");
  const json& t = c.at("tensors");
  auto get = [&](const std::string& n) { return test::tensor_from_json(t.at(n)); };
  nn::BatchNormOptions opts(a.at("num_features").get<int64_t>());
  opts.eps(a.at("eps").get<double>())
      .momentum(a.at("momentum").is_null() ? std::nullopt : std::optional<double>(a.at("momentum").get<double>()))
      .affine(a.at("affine").get<bool>())
      .track_running_stats(a.at("track_running_stats").get<bool>());
  std::shared_ptr<nn::BatchNormImplBase> bn;
  if (a.at("dims") == 1)
    bn = nn::BatchNorm1d(opts).ptr();
  else
    bn = nn::BatchNorm2d(opts).ptr();
  if (opts.affine()) {
    NoGradGuard no_grad;
    bn->weight.copy_(get("weight"));
    bn->bias.copy_(get("bias"));
  }
  // Handles taken before training: the buffers are updated in place, so these see the result.
  Tensor rm = bn->running_mean, rv = bn->running_var, nbt = bn->num_batches_tracked;
  bn->train();
  const int steps = a.at("steps").get<int>();
  for (int i = 0; i < steps; ++i) {
    SCOPED_TRACE(i);
    Tensor y = bn->forward(get("x" + std::to_string(i)));
    EXPECT_TRUE(all_close(y, t.at("y" + std::to_string(i)), 1e-4, 2e-5));
  }
  if (opts.track_running_stats()) {
    EXPECT_TRUE(all_close(rm, t.at("running_mean"), 1e-5, 1e-6));
    EXPECT_TRUE(all_close(rv, t.at("running_var"), 1e-5, 1e-6));
    EXPECT_EQ(nbt.dtype(), kInt64);
    EXPECT_EQ(nbt.dim(), 0);
    EXPECT_EQ(nbt.item<int64_t>(), t.at("num_batches_tracked").at("data")[0].get<int64_t>());
    EXPECT_TRUE(rm.is_same(bn->named_buffers()["running_mean"]));
  } else {
    EXPECT_FALSE(rm.defined());
  }
  bn->eval();
  EXPECT_TRUE(all_close(bn->forward(get("x_eval")), t.at("y_eval"), 1e-4, 2e-5));
}

TEST(BatchNormModule, MatchesPyTorchOverTrainingSteps) {
  int n = 0;
  for (const json& c : test::golden_file("normalization.json").at("cases")) {
    if (c.at("op") != "batch_norm_module") continue;
    SCOPED_TRACE(c.at("name").get<std::string>());
    run_module_case(c);
    ++n;
  }
  EXPECT_GE(n, 8);
}

// ---------------------------------------------------------------- printing

TEST(NormModules, Printing) {
  EXPECT_EQ(nn::BatchNorm2d(16)->to_string(), "BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  EXPECT_EQ(nn::BatchNorm1d(nn::BatchNormOptions(8).momentum(std::nullopt).affine(false).eps(1e-3))->to_string(),
            "BatchNorm1d(8, eps=0.001, momentum=None, affine=False, track_running_stats=True)");
  EXPECT_EQ(nn::BatchNorm1d(nn::BatchNormOptions(4).track_running_stats(false).momentum(0.01))->to_string(),
            "BatchNorm1d(4, eps=1e-05, momentum=0.01, affine=True, track_running_stats=False)");
  EXPECT_EQ(nn::LayerNorm(std::vector<int64_t>{10})->to_string(), "LayerNorm((10,), eps=1e-05, elementwise_affine=True)");
  EXPECT_EQ(nn::LayerNorm(nn::LayerNormOptions({2, 3}).eps(1e-6).elementwise_affine(false))->to_string(),
            "LayerNorm((2, 3), eps=1e-06, elementwise_affine=False)");
  EXPECT_EQ(nn::Dropout()->to_string(), "Dropout(p=0.5, inplace=False)");
  EXPECT_EQ(nn::Dropout(0.2)->to_string(), "Dropout(p=0.2, inplace=False)");
  EXPECT_EQ(nn::Dropout(nn::DropoutOptions(0.1).inplace(true))->to_string(), "Dropout(p=0.1, inplace=True)");
  nn::Sequential seq(nn::Linear(4, 8), nn::BatchNorm1d(8), nn::Dropout(0.25), nn::LayerNorm(std::vector<int64_t>{8}));
  EXPECT_EQ(seq->to_string(),
            "Sequential(\n"
            "  (0): Linear(in_features=4, out_features=8, bias=True)\n"
            "  (1): BatchNorm1d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
            "  (2): Dropout(p=0.25, inplace=False)\n"
            "  (3): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
            ")");
}

TEST(NormModules, PythonFloatRepr) {
  using nn::detail::python_float_repr;
  EXPECT_EQ(python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(python_float_repr(1e-6), "1e-06");
  EXPECT_EQ(python_float_repr(2.5e-5), "2.5e-05");
  EXPECT_EQ(python_float_repr(1e-4), "0.0001");
  EXPECT_EQ(python_float_repr(0.001), "0.001");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(0.5), "0.5");
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(-3.25), "-3.25");
  EXPECT_EQ(python_float_repr(123.456), "123.456");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1.5e100), "1.5e+100");
  EXPECT_EQ(python_float_repr(1.0 / 3.0), "0.3333333333333333");
}

// ---------------------------------------------------------------- parameters, buffers, state

TEST(BatchNormModule, ParametersBuffersAndStateDict) {
  nn::BatchNorm2d bn(3);
  EXPECT_EQ(keys_of(bn->state_dict()), (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(keys_of(bn->named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(keys_of(bn->named_buffers()), (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_TRUE(all_close(bn->weight, ones({3}), 0, 0));
  EXPECT_TRUE(all_close(bn->bias, zeros({3}), 0, 0));
  EXPECT_TRUE(all_close(bn->running_mean, zeros({3}), 0, 0));
  EXPECT_TRUE(all_close(bn->running_var, ones({3}), 0, 0));
  EXPECT_EQ(bn->num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(bn->num_batches_tracked.dim(), 0);
  EXPECT_TRUE(bn->weight.requires_grad());
  EXPECT_FALSE(bn->running_mean.requires_grad());

  nn::BatchNorm1d no_affine(nn::BatchNormOptions(3).affine(false));
  EXPECT_EQ(keys_of(no_affine->state_dict()), (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_TRUE(no_affine->parameters().empty());
  nn::BatchNorm1d no_track(nn::BatchNormOptions(3).track_running_stats(false));
  EXPECT_EQ(keys_of(no_track->state_dict()), (std::vector<std::string>{"weight", "bias"}));

  // reset_running_stats / reset_parameters.
  bn->train();
  bn->forward(rand({2, 3, 2, 2}));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  bn->reset_running_stats();
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  EXPECT_TRUE(all_close(bn->running_var, ones({3}), 0, 0));

  // state_dict round trip into a fresh module.
  bn->forward(rand({2, 3, 2, 2}) * 3.0);
  nn::BatchNorm2d other(3);
  other->load_state_dict(bn->state_dict());
  EXPECT_TRUE(all_close(other->running_mean, bn->running_mean, 0, 0));
  EXPECT_EQ(other->num_batches_tracked.item<int64_t>(), 1);
}

TEST(BatchNormModule, InputChecks) {
  nn::BatchNorm1d bn1(3);
  nn::BatchNorm2d bn2(3);
  EXPECT_NO_THROW(bn1(rand({4, 3})));
  EXPECT_NO_THROW(bn1(rand({4, 3, 5})));
  try {
    bn1(rand({2, 3, 4, 5}));
    ADD_FAILURE() << "4D input accepted by BatchNorm1d";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("expected 2D or 3D input (got 4D input)"), std::string::npos) << e.what();
  }
  try {
    bn2(rand({2, 3, 4}));
    ADD_FAILURE() << "3D input accepted by BatchNorm2d";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("expected 4D input (got 3D input)"), std::string::npos) << e.what();
  }
  try {
    bn1(rand({1, 3}));
    ADD_FAILURE() << "a single value per channel accepted in training";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Expected more than 1 value per channel when training, got input size torch.Size([1, 3])"),
              std::string::npos)
        << e.what();
  }
  bn1->eval();
  EXPECT_NO_THROW(bn1(rand({1, 3})));  // eval uses the running statistics
  EXPECT_THROW(bn1(rand({4, 5})), ShapeError);
}

TEST(BatchNormModule, EvalWithoutTrackingUsesBatchStatistics) {
  nn::BatchNorm1d bn(nn::BatchNormOptions(2).track_running_stats(false).affine(false));
  bn->eval();
  Tensor x = rand({6, 2}) * 5.0 + 2.0;
  EXPECT_TRUE(all_close(bn(x), batch_norm(x, {}, {}, {}, {}, true), 0, 0));
}

TEST(BatchNormModule, BackwardReachesParameters) {
  nn::BatchNorm2d bn(3);
  Tensor x = rand({2, 3, 4, 4}).requires_grad_(true);
  Tensor w = rand({2, 3, 4, 4});
  sum(bn(x) * w).backward();
  ASSERT_TRUE(bn->weight.grad().defined());
  ASSERT_TRUE(bn->bias.grad().defined());
  EXPECT_TRUE(all_close(bn->bias.grad(), sum(w, {0, 2, 3}), 1e-5, 1e-5));
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

TEST(BatchNormModule, CloneHasItsOwnBuffersAndDtypeConversion) {
  auto bn = nn::BatchNorm1d(4).ptr();
  auto copy = nn::clone(bn);
  copy->train();
  copy->forward(rand({8, 4}) + 3.0);
  EXPECT_EQ(copy->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  EXPECT_TRUE(all_close(bn->running_mean, zeros({4}), 0, 0));
  EXPECT_FALSE(all_close(copy->running_mean, zeros({4}), 0, 0));
  // to(float64): floating buffers convert, the counter stays int64; forward runs in float64.
  copy->to(kFloat64);
  EXPECT_EQ(copy->running_mean.dtype(), kFloat64);
  EXPECT_EQ(copy->num_batches_tracked.dtype(), kInt64);
  Tensor y = copy->forward(rand({8, 4}, kFloat64));
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_EQ(copy->num_batches_tracked.item<int64_t>(), 2);
}

// ---------------------------------------------------------------- LayerNorm

TEST(LayerNormModule, MatchesFunctionalAndParameters) {
  nn::LayerNorm ln(nn::LayerNormOptions({4, 5}).eps(1e-3));
  EXPECT_EQ(keys_of(ln->named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(ln->weight.sizes(), (Shape{4, 5}));
  EXPECT_TRUE(all_close(ln->weight, ones({4, 5}), 0, 0));
  EXPECT_TRUE(all_close(ln->bias, zeros({4, 5}), 0, 0));
  {
    NoGradGuard no_grad;
    ln->weight.copy_(rand({4, 5}));
    ln->bias.copy_(rand({4, 5}));
  }
  Tensor x = rand({3, 4, 5});
  EXPECT_TRUE(all_close(ln(x), layer_norm(x, {4, 5}, ln->weight, ln->bias, 1e-3), 0, 0));
  nn::LayerNorm plain(nn::LayerNormOptions({5}).elementwise_affine(false));
  EXPECT_TRUE(plain->parameters().empty());
  EXPECT_TRUE(plain->state_dict().empty());
  EXPECT_TRUE(all_close(plain(x), layer_norm(x, {5}), 0, 0));
  EXPECT_THROW(ln(rand({3, 5, 4})), ShapeError);
}

// ---------------------------------------------------------------- Dropout

TEST(DropoutModule, TrainAndEval) {
  nn::Dropout drop(0.5);
  EXPECT_EQ(drop->options.p(), 0.5);
  EXPECT_TRUE(drop->parameters().empty());
  Tensor x = ones({100, 100});
  drop->train();
  Tensor y = drop(x);
  double zeros_frac = mean(y.eq(0.0).to(kFloat32)).item<double>();
  EXPECT_NEAR(zeros_frac, 0.5, 0.05);
  drop->eval();
  EXPECT_TRUE(drop(x).is_same(x));
  // Reproducible through the default generator.
  drop->train();
  manual_seed(3);
  Tensor a = drop(x);
  manual_seed(3);
  EXPECT_TRUE(all_close(drop(x), a, 0, 0));
  // In place.
  nn::Dropout inplace(nn::DropoutOptions(0.3).inplace(true));
  Tensor z = ones({10, 10});
  Tensor r = inplace(z);
  EXPECT_TRUE(r.is_same(z));
  EXPECT_GT(mean(z.eq(0.0).to(kFloat32)).item<double>(), 0.0);
  EXPECT_THROW(nn::Dropout(1.5), ValueError);
  EXPECT_THROW(nn::Dropout(-0.5), ValueError);
}

}  // namespace
}  // namespace dp
