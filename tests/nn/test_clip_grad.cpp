// Gradient clipping (dp/nn/utils/clip_grad.h) against PyTorch 1.13 (tests/golden/gen_clip_grad.py):
// clip_grad_norm_ of order 2, 1, inf and 3, clipping and not, float32 and float64, non-finite
// gradients; clip_grad_value_; parameters spread over several devices; the argument forms and
// errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include "dp/core/device_registry.h"
#include "dp/nn/nn.h"
#include "dp/nn/utils/clip_grad.h"
#include "support/golden.h"

namespace dp::nn {
namespace {

using test::all_close;
using test::golden_file;
using test::json;
using test::tensor_from_json;
using utils::clip_grad_norm_;
using utils::clip_grad_value_;

const json& golden() { return golden_file("clip_grad.json"); }

double number(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::nan("");
    return s == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  return v.get<double>();
}

// The case's parameters, with gradients as the generator made them, parameter i on devices[i % n].
std::vector<Tensor> setup(const json& c, const std::vector<Device>& devices = {Device::cpu()}) {
  const DType dtype = c["dtype"] == "float64" ? kFloat64 : kFloat32;
  std::vector<Tensor> params;
  for (size_t i = 0; i < golden()["params"].size(); ++i) {
    const Device d = devices[i % devices.size()];
    Tensor p = tensor_from_json(golden()["params"][i]).to(d, dtype).requires_grad_(true);
    const json& g = golden()["grads"][i];
    if (!g.is_null()) p.set_grad((tensor_from_json(g).to(dtype) * c["scale"].get<double>()).to(d));
    params.push_back(p);
  }
  if (c.contains("poison")) {
    Tensor g = params[0].grad();
    Tensor host = g.cpu().contiguous().clone();
    if (dtype == kFloat64)
      host.data_ptr<double>()[0] = number(c["poison"]);
    else
      host.data_ptr<float>()[0] = static_cast<float>(number(c["poison"]));
    params[0].set_grad(host.to(g.device()));
  }
  return params;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& c : golden()["cases"]) names.push_back(c["name"].get<std::string>());
  return names;
}

const json& golden_case(const std::string& name) {
  for (const auto& c : golden()["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no case " + name);
}

void run_case(const json& c, const std::vector<Tensor>& params) {
  const bool f64 = c["dtype"] == "float64";
  // float32 norms may round differently by the summation order (ATen's vectorised reduction).
  const double rtol = f64 ? 1e-12 : 2e-6;
  const json& args = c["args"];
  if (c["kind"] == "norm") {
    const double total = clip_grad_norm_(params, args["max_norm"].get<double>(), number(args["norm_type"]));
    const double expected = number(c["total_norm"]);
    if (std::isnan(expected))
      EXPECT_TRUE(std::isnan(total));
    else if (std::isinf(expected))
      EXPECT_EQ(total, expected);
    else
      EXPECT_NEAR(total, expected, rtol * expected);
  } else {
    clip_grad_value_(params, args["clip_value"].get<double>());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    const json& after = c["after"][i];
    if (after.is_null()) {
      EXPECT_FALSE(params[i].grad().defined());
      continue;
    }
    EXPECT_EQ(params[i].grad().device(), params[i].device());
    EXPECT_EQ(params[i].grad().dtype(), params[i].dtype());
    EXPECT_TRUE(all_close(params[i].grad().cpu(), after, rtol, 1e-12));
  }
}

class ClipGradGolden : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(3); }
};

TEST_P(ClipGradGolden, OnTheHost) {
  const json& c = golden_case(GetParam());
  run_case(c, setup(c));
}

// The parameters on three devices (and the host): each norm on its gradient's device, the total on
// the first one's, each gradient scaled where it is.
TEST_P(ClipGradGolden, OnSeveralDevices) {
  const json& c = golden_case(GetParam());
  run_case(c, setup(c, {Device("cpu:1"), Device::cpu(), Device("cpu:2"), Device("cpu:0")}));
}

INSTANTIATE_TEST_SUITE_P(PyTorch, ClipGradGolden, ::testing::ValuesIn(case_names()), [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});

TEST(ClipGrad, ErrorIfNonfiniteLeavesTheGradientsAlone) {
  for (const char* name : {"norm2|inf_gradient", "norm2|nan_gradient"}) {
    SCOPED_TRACE(name);
    std::vector<Tensor> params = setup(golden_case(name));
    std::vector<Tensor> before;
    for (const Tensor& p : params) before.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    EXPECT_THAT([&] { clip_grad_norm_(params, 1.0, 2.0, /*error_if_nonfinite=*/true); },
                ::testing::ThrowsMessage<ValueError>(::testing::HasSubstr("the total norm of order 2 for gradients from `parameters` is")));
    for (size_t i = 0; i < params.size(); ++i)
      if (before[i].defined()) {
        EXPECT_TRUE(all_close(params[i].grad(), before[i], 0, 0));
      }
  }
  // A finite norm with error_if_nonfinite clips as usual.
  std::vector<Tensor> params = setup(golden_case("norm2|clipped"));
  EXPECT_NEAR(clip_grad_norm_(params, 1.0, 2.0, true), number(golden_case("norm2|clipped")["total_norm"]), 1e-5);
}

TEST(ClipGrad, ArgumentForms) {
  // No gradient at all: 0, nothing changes.
  Tensor a = ones({3}).requires_grad_(true), b = ones({2}).requires_grad_(true);
  EXPECT_EQ(clip_grad_norm_({a, b}, 1.0), 0.0);
  clip_grad_value_({a, b}, 1.0);
  // One tensor, a braced list, a module's parameters.
  a.set_grad(full({3}, 4.0));
  EXPECT_NEAR(clip_grad_norm_(a, 1.0), std::sqrt(48.0), 1e-5);
  EXPECT_NEAR(norm(a.grad()).item<double>(), 1.0, 1e-5);
  b.set_grad(full({2}, -3.0));
  clip_grad_value_({a, b}, 0.25);
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{-0.25f, -0.25f}));
  clip_grad_value_(b, 0.1);
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{-0.1f, -0.1f}));
  Linear lin(3, 2);
  sum(lin(ones({4, 3}))).backward();
  EXPECT_GT(clip_grad_norm_(lin->parameters(), 0.5, std::numeric_limits<double>::infinity()), 0.5);
  EXPECT_LE(max(abs(lin->weight.grad())).item<double>(), 0.5);
  // The gradient is scaled in place: a tensor that holds it (an optimizer, a hook) sees the change.
  Tensor held = lin->weight.grad();
  clip_grad_value_(lin->parameters(), 0.01);
  EXPECT_LE(max(abs(held)).item<double>(), 0.01);
}

TEST(ClipGrad, ArgumentErrors) {
  Tensor a = ones({3}).requires_grad_(true);
  a.set_grad(ones({3}));
  EXPECT_THROW(clip_grad_norm_(a, std::nan(""), 2.0), ValueError);
  EXPECT_THROW(clip_grad_norm_(a, 1.0, std::nan("")), ValueError);
  EXPECT_THROW(clip_grad_value_(a, std::nan("")), ValueError);
  EXPECT_THAT(
      [&] {
        clip_grad_norm_(std::vector<Tensor>{a, Tensor()}, 1.0);
      },
      ::testing::ThrowsMessage<ValueError>(::testing::HasSubstr("clip_grad_norm_: parameter 1 is an undefined tensor")));
}

}  // namespace
}  // namespace dp::nn
