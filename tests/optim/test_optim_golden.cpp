// Optimizers and schedulers against PyTorch 1.13 (tests/golden/gen_optim.py): the parameters after
// each of 20 steps for SGD / Adam / AdamW configurations in two param groups (group options
// inheriting unset fields from the defaults, a parameter without gradient), in float32 and
// float64, and schedulers' learning rates over 30 steps. The fused kernels repeat ATen's
// roundings, so the values must be equal bit for bit.
#include <gtest/gtest.h>
#include <cstring>
#include "dp/optim/optim.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::golden_case;
using test::golden_file;
using test::json;
using test::tensor_from_json;

constexpr const char* kFile = "optim.json";

// Bitwise equality of every element (NaN == NaN), naming the first difference.
::testing::AssertionResult bit_equal(const Tensor& actual, const json& expected_json) {
  Tensor expected = tensor_from_json(expected_json).to(actual.dtype());
  if (actual.sizes() != expected.sizes()) return ::testing::AssertionFailure() << "shape " << actual.size_str() << " vs " << expected.size_str();
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &e[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs PyTorch " << e[i] << " (relative difference "
                                           << std::abs(a[i] - e[i]) / std::abs(e[i]) << ")";
  return ::testing::AssertionSuccess();
}

template <typename Options>
void apply_common(Options& o, const json& j) {
  if (j.contains("lr")) o.lr(j["lr"].get<double>());
  if (j.contains("weight_decay")) o.weight_decay(j["weight_decay"].get<double>());
  if (j.contains("maximize")) o.maximize(j["maximize"].get<bool>());
}

optim::SGDOptions sgd_options(const json& j, optim::SGDOptions o) {
  apply_common(o, j);
  if (j.contains("momentum")) o.momentum(j["momentum"].get<double>());
  if (j.contains("dampening")) o.dampening(j["dampening"].get<double>());
  if (j.contains("nesterov")) o.nesterov(j["nesterov"].get<bool>());
  return o;
}

template <typename Options>
Options adam_options(const json& j, Options o) {
  apply_common(o, j);
  if (j.contains("betas")) o.betas({j["betas"][0].get<double>(), j["betas"][1].get<double>()});
  if (j.contains("eps")) o.eps(j["eps"].get<double>());
  if (j.contains("amsgrad")) o.amsgrad(j["amsgrad"].get<bool>());
  return o;
}

// Group options hold only the fields the case overrides: the rest must come from the defaults.
std::unique_ptr<optim::Optimizer> make_optimizer(const json& c, const std::vector<Tensor>& params) {
  std::vector<optim::OptimizerParamGroup> groups;
  const std::string name = c["optimizer"];
  for (const json& g : c["groups"]) {
    std::vector<Tensor> ps;
    for (const json& i : g["params"]) ps.push_back(params[i.get<size_t>()]);
    const json& o = g["options"];
    if (o.empty())
      groups.emplace_back(ps);  // no options at all: every default
    else if (name == "SGD")
      groups.emplace_back(ps, sgd_options(o, optim::SGDOptions()));
    else if (name == "Adam")
      groups.emplace_back(ps, adam_options(o, optim::AdamOptions()));
    else
      groups.emplace_back(ps, adam_options(o, optim::AdamWOptions()));
  }
  const json& d = c["defaults"];
  if (name == "SGD") return std::make_unique<optim::SGD>(groups, sgd_options(d, optim::SGDOptions(d["lr"].get<double>())));
  if (name == "Adam") return std::make_unique<optim::Adam>(groups, adam_options(d, optim::AdamOptions()));
  return std::make_unique<optim::AdamW>(groups, adam_options(d, optim::AdamWOptions()));
}

class OptimizerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerGolden, TrajectoryMatchesPyTorch) {
  const json& c = golden_case(kFile, GetParam());
  const json& file = golden_file(kFile);
  const DType dtype = c["dtype"] == "float32" ? kFloat32 : kFloat64;
  std::vector<Tensor> params;
  for (const json& p : file["init"]) params.push_back(tensor_from_json(p).to(dtype).requires_grad_(true));
  const std::vector<Tensor> initial = [&] {
    std::vector<Tensor> v;
    for (const Tensor& p : params) v.push_back(p.detach().clone());
    return v;
  }();
  auto opt = make_optimizer(c, params);
  std::unique_ptr<optim::LRScheduler> scheduler;
  if (c.contains("scheduler"))
    scheduler = std::make_unique<optim::CosineAnnealingLR>(*opt, c["scheduler"]["T_max"].get<int64_t>(), c["scheduler"]["eta_min"].get<double>());
  const json& grads = file["grads"];
  ASSERT_EQ(grads.size(), c["after"].size());
  for (size_t step = 0; step < grads.size(); ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      const json& g = grads[step][i];
      params[i].set_grad(g.is_null() ? Tensor() : tensor_from_json(g).to(dtype));
    }
    opt->step();
    if (scheduler) scheduler->step();
    for (size_t i = 0; i < params.size(); ++i)
      ASSERT_TRUE(bit_equal(params[i], c["after"][step][i])) << GetParam() << ", parameter " << i << " after step " << step + 1;
  }
  // The parameter that never had a gradient is untouched and has no state.
  EXPECT_TRUE(bit_equal(params[3], test::tensor_to_json(initial[3])));
  EXPECT_EQ(opt->state().count(params[3].unsafe_impl()), 0u);
}

std::vector<std::string> optimizer_cases() {
  std::vector<std::string> names;
  for (const json& c : golden_file(kFile)["cases"])
    if (c.contains("optimizer")) names.push_back(c["name"]);
  return names;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, OptimizerGolden, ::testing::ValuesIn(optimizer_cases()), param_name);

class SchedulerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerGolden, LearningRatesMatchPyTorch) {
  const json& c = golden_case(kFile, GetParam());
  Tensor a = zeros({2}).requires_grad_(true), b = zeros({2}).requires_grad_(true);
  optim::SGD opt({optim::OptimizerParamGroup({a}, optim::SGDOptions(c["group_lrs"][0].get<double>())),
                  optim::OptimizerParamGroup({b}, optim::SGDOptions(c["group_lrs"][1].get<double>()))},
                 optim::SGDOptions(1.0));
  const json& args = c["args"];
  std::unique_ptr<optim::LRScheduler> s;
  if (c["scheduler"] == "StepLR") {
    s = args.contains("gamma") ? std::make_unique<optim::StepLR>(opt, args["step_size"].get<int64_t>(), args["gamma"].get<double>())
                               : std::make_unique<optim::StepLR>(opt, args["step_size"].get<int64_t>());
  } else {
    s = args.contains("eta_min") ? std::make_unique<optim::CosineAnnealingLR>(opt, args["T_max"].get<int64_t>(), args["eta_min"].get<double>())
                                 : std::make_unique<optim::CosineAnnealingLR>(opt, args["T_max"].get<int64_t>());
  }
  const json& lrs = c["lrs"];
  for (size_t step = 0; step < lrs.size(); ++step) {
    if (step > 0) {
      opt.step();
      s->step();
    }
    EXPECT_EQ(s->last_epoch(), static_cast<int64_t>(step));
    ASSERT_EQ(s->get_last_lr().size(), 2u);
    for (size_t g = 0; g < 2; ++g) {
      const double want = lrs[step][g].get<double>();
      EXPECT_EQ(s->get_last_lr()[g], want) << GetParam() << " epoch " << step << " group " << g;
      EXPECT_EQ(opt.get_lr(g), want) << GetParam() << " epoch " << step << " group " << g;
    }
  }
}

std::vector<std::string> scheduler_cases() {
  std::vector<std::string> names;
  for (const json& c : golden_file(kFile)["cases"])
    if (!c.contains("optimizer")) names.push_back(c["name"]);
  return names;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, SchedulerGolden, ::testing::ValuesIn(scheduler_cases()), param_name);

}  // namespace
}  // namespace dp
