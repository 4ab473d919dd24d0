// GradScaler against torch 1.13's GradScaler logic (tests/golden/gen_autocast.py): the sequence
// of scales, which steps are skipped, the growth tracker and the parameters over SGD steps with
// forced inf/nan gradients; plus its state_dict, misuse errors and the disabled scaler.
#include <cmath>
#include <limits>
#include "dp/amp/autocast.h"
#include "dp/optim/grad_scaler.h"
#include "dp/optim/optim.h"
#include "support/golden.h"

namespace dp {
namespace {

using amp::GradScaler;
using amp::GradScalerOptions;
using test::all_close;
using test::golden_file;
using test::tensor_from_json;

GradScalerOptions options_from(const test::json& o) {
  GradScalerOptions opts;
  if (o.contains("init_scale")) opts.init_scale(o["init_scale"].get<double>());
  if (o.contains("growth_factor")) opts.growth_factor(o["growth_factor"].get<double>());
  if (o.contains("backoff_factor")) opts.backoff_factor(o["backoff_factor"].get<double>());
  if (o.contains("growth_interval")) opts.growth_interval(o["growth_interval"].get<int64_t>());
  return opts;
}

double forced_value(const std::string& s) {
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  return s == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

void replay(const std::string& name) {
  SCOPED_TRACE(name);
  const auto& g = golden_file("autocast.json")["scaler"][name];
  Tensor w = tensor_from_json(g["params"]["weight"], true), b = tensor_from_json(g["params"]["bias"], true);
  const Tensor x = tensor_from_json(g["x"]), y = tensor_from_json(g["y"]);
  optim::SGD opt({w, b}, optim::SGDOptions(0.05));
  GradScaler scaler(options_from(g["options"]));
  const auto& steps = g["steps"];
  ASSERT_GT(steps.size(), 0u);
  int skipped = 0;
  for (size_t it = 0; it < steps.size(); ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    const auto& s = steps[it];
    opt.zero_grad();
    Tensor loss = dp::mse_loss(dp::linear(x, w, b), y);
    EXPECT_EQ(scaler.get_scale(), s["scale_before"].get<double>());
    Tensor scaled = scaler.scale(loss);
    EXPECT_EQ(scaled.sizes(), Shape({1}));  // a 0-dim loss times the [1] scale, as in PyTorch
    EXPECT_TRUE(all_close(scaled, s["scaled_loss"], 1e-6, 0));
    scaled.backward();
    const std::string key = std::to_string(it);
    if (g["forced"].contains(key)) {
      NoGradGuard no_grad;
      w.mutable_grad().select(0, 0).select(0, 1).fill_(forced_value(g["forced"][key]));
    }
    const Tensor before = w.detach().clone();
    scaler.step(opt);
    const bool stepped = !dp::equal(before, w.detach());
    EXPECT_EQ(stepped, s["stepped"].get<bool>());
    skipped += !stepped;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), s["scale_after"].get<double>());
    EXPECT_EQ(scaler.get_growth_tracker(), s["growth_tracker"].get<int64_t>());
    EXPECT_TRUE(all_close(w, s["weight"], 1e-5, 1e-6));
    EXPECT_TRUE(all_close(b, s["bias"], 1e-5, 1e-6));
  }
  const amp::GradScalerState sd = scaler.state_dict();
  for (const auto& [key, value] : g["state_dict"].items()) {
    ASSERT_TRUE(sd.count(key)) << key;
    EXPECT_EQ(sd.at(key), value.get<double>()) << key;
  }
  EXPECT_EQ(sd.size(), g["state_dict"].size());
  if (g["forced"].size() > 0) {
    EXPECT_GT(skipped, 0);
  }
}

TEST(GradScaler, DefaultOptionsMatchTorch) { replay("default"); }
TEST(GradScaler, GrowthAndBackoffMatchTorch) { replay("growth"); }
TEST(GradScaler, GrowthPastFloat32KeepsTheScaleAsTorch) { replay("overflow"); }

TEST(GradScaler, DefaultsAreTorchs) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.get_growth_factor(), 2.0);
  EXPECT_EQ(s.get_backoff_factor(), 0.5);
  EXPECT_EQ(s.get_growth_interval(), 2000);
  EXPECT_TRUE(s.is_enabled());
}

TEST(GradScaler, StateDictRoundTripsAndResumes) {
  Tensor w = randn({3}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  GradScaler a(GradScalerOptions().init_scale(512).growth_interval(4));
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    a.scale(w.sum()).backward();
    a.step(opt);
    a.update();
  }
  EXPECT_EQ(a.get_growth_tracker(), 3);
  GradScaler b;
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.state_dict(), a.state_dict());
  EXPECT_EQ(b.get_scale(), 512.0);
  EXPECT_EQ(b.get_growth_interval(), 4);
  // One more good step grows both the same way.
  for (GradScaler* s : {&a, &b}) {
    opt.zero_grad();
    s->scale(w.sum()).backward();
    s->step(opt);
    s->update();
  }
  EXPECT_EQ(a.get_scale(), 1024.0);
  EXPECT_EQ(b.get_scale(), 1024.0);
  // A disabled scaler saves nothing and refuses to be the source of a load.
  GradScaler off(GradScalerOptions().enabled(false));
  EXPECT_TRUE(off.state_dict().empty());
  EXPECT_THROW(b.load_state_dict(off.state_dict()), ValueError);
  amp::GradScalerState bad = a.state_dict();
  bad.erase("growth_factor");
  EXPECT_THROW(b.load_state_dict(bad), ValueError);
  EXPECT_EQ(b.get_scale(), 1024.0);  // a refused load changes nothing
}

TEST(GradScaler, MisuseIsRefusedWithTheReason) {
  Tensor w = randn({3}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  GradScaler s;
  auto expect_message = [](const auto& fn, const std::string& part) {
    try {
      fn();
      ADD_FAILURE() << "expected ValueError containing: " << part;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_message([&] { s.step(opt); }, "did not call scaler.scale");
  s.scale(w.sum()).backward();
  s.unscale_(opt);
  expect_message([&] { s.unscale_(opt); }, "unscale_() has already been called on this optimizer since the last update()");
  s.step(opt);
  expect_message([&] { s.step(opt); }, "step() has already been called since the last update()");
  expect_message([&] { s.unscale_(opt); }, "unscale_() is being called after step()");
  s.update();
  // unscale_ divided the gradient by the scale: w.sum()'s gradient is 1.
  EXPECT_TRUE(all_close(w.grad(), dp::ones({3}), 0, 0));
  expect_message([&] { s.update(); }, "no inf checks were recorded");
  EXPECT_THROW(GradScaler(GradScalerOptions().growth_factor(1.0)), ValueError);
  EXPECT_THROW(GradScaler(GradScalerOptions().backoff_factor(1.0)), ValueError);
  EXPECT_THROW(GradScaler(GradScalerOptions().growth_interval(0)), ValueError);
  EXPECT_THROW(GradScaler(GradScalerOptions().init_scale(std::numeric_limits<double>::infinity())), ValueError);
  // float16 gradients are refused, as PyTorch does.
  Tensor h = randn({3}).to(kFloat16).requires_grad_(true);
  optim::SGD opt16({h}, optim::SGDOptions(0.1));
  GradScaler s16;
  s16.scale(h.to(kFloat32).sum()).backward();
  EXPECT_THROW(s16.unscale_(opt16), DTypeError);
}

TEST(GradScaler, UpdateWithANewScale) {
  Tensor w = randn({3}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  GradScaler s;
  s.scale(w.sum()).backward();
  s.step(opt);
  s.update(128.0);
  EXPECT_EQ(s.get_scale(), 128.0);
  EXPECT_EQ(s.get_growth_tracker(), 0);
}

TEST(GradScaler, DisabledPassesThrough) {
  Tensor w = randn({3}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  GradScaler s(GradScalerOptions().enabled(false));
  Tensor loss = w.sum();
  Tensor scaled = s.scale(loss);
  EXPECT_EQ(scaled.unsafe_impl(), loss.unsafe_impl());
  scaled.backward();
  const Tensor before = w.detach().clone();
  s.step(opt);
  s.update();
  EXPECT_FALSE(dp::equal(before, w.detach()));
  EXPECT_EQ(s.get_scale(), 1.0);
}

// The usual loop: bf16 autocast forward, scaled backward, float32 gradients unscaled to the
// same values as an unscaled backward gives.
TEST(GradScaler, WithAutocastGradientsComeBackUnscaled) {
  manual_seed(3);
  Tensor w = randn({4, 6}).requires_grad_(true);
  const Tensor x = randn({5, 6}), y = randn({5, 4});
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  auto loss_fn = [&] {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    return dp::mse_loss(dp::linear(x, w), y);
  };
  loss_fn().backward();
  const Tensor plain = w.grad().clone();
  opt.zero_grad();
  GradScaler s;
  s.scale(loss_fn()).backward();
  s.unscale_(opt);
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  // Scaling by a power of two is exact until bfloat16 rounding of the scaled gradient.
  EXPECT_TRUE(all_close(w.grad(), plain, 1e-2, 1e-3));
}

}  // namespace
}  // namespace dp
