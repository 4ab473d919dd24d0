// Every element-wise op against PyTorch 1.13 (tests/golden/elementwise.json, written by
// tests/golden/gen_elementwise.py): values and dtypes for each dtype, broadcasting, non-contiguous
// inputs, 0-dim and empty tensors, special values, in-place forms, torch.result_type, and
// gradients through broadcasting / mixed dtypes (out.backward(grad_output) vs PyTorch's .grad).
// One test per op; each runs every golden case of that op.
#include <gtest/gtest.h>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include "support/golden.h"

namespace dp {
namespace {

using test::json;
using test::tensor_from_json;
using Args = json;
using OpFn = std::function<Tensor(std::vector<Tensor>&, const Args&)>;

const char* kFile = "elementwise.json";

Scalar scalar_of(const json& v) {
  if (v.is_boolean()) return Scalar(v.get<bool>());
  if (v.is_number_integer()) return Scalar(v.get<int64_t>());
  return Scalar(v.get<double>());
}
Scalar arg(const Args& a, const char* key, Scalar dflt = Scalar(1)) { return a.is_object() && a.contains(key) ? scalar_of(a.at(key)) : dflt; }
std::optional<Scalar> opt_arg(const Args& a, const char* key) {
  if (!a.is_object() || !a.contains(key) || a.at(key).is_null()) return std::nullopt;
  return scalar_of(a.at(key));
}

Tensor apply_view(const Tensor& t, const json& view) {
  if (view.is_null()) return t;
  const std::string v = view.get<std::string>();
  if (v == "t") return t.t();
  if (v == "step") return t.slice(1, std::nullopt, std::nullopt, 2);
  if (v == "expand") return t.expand({2, t.size(1)});
  if (v == "flip") return t.transpose(0, 1);
  throw std::runtime_error("unknown view " + v);
}

#define UNARY(name, call)                                                \
  {                                                                      \
    name, [](std::vector<Tensor>& x, const Args&) { return call(x[0]); } \
  }
#define BINARY(name, call)                                                     \
  {                                                                            \
    name, [](std::vector<Tensor>& x, const Args&) { return call(x[0], x[1]); } \
  }
#define SCALAR(name, expr)                            \
  {                                                   \
    name, [](std::vector<Tensor>& x, const Args& a) { \
      const Scalar s = arg(a, "s");                   \
      (void)s;                                        \
      return expr;                                    \
    }                                                 \
  }

const std::map<std::string, OpFn>& op_table() {
  static const std::map<std::string, OpFn> table = {
      BINARY("add", dp::add),
      BINARY("sub", dp::sub),
      BINARY("mul", dp::mul),
      BINARY("div", dp::div),
      BINARY("maximum", dp::maximum),
      BINARY("minimum", dp::minimum),
      BINARY("pow", dp::pow),
      {"add_alpha", [](std::vector<Tensor>& x, const Args& a) { return dp::add(x[0], x[1], arg(a, "alpha")); }},
      {"sub_alpha", [](std::vector<Tensor>& x, const Args& a) { return dp::sub(x[0], x[1], arg(a, "alpha")); }},
      SCALAR("add_scalar", dp::add(x[0], s)),
      SCALAR("sub_scalar", dp::sub(x[0], s)),
      SCALAR("mul_scalar", dp::mul(x[0], s)),
      SCALAR("div_scalar", dp::div(x[0], s)),
      SCALAR("rsub_scalar", dp::rsub(x[0], s)),
      SCALAR("rdiv_scalar", dp::div(s, x[0])),
      SCALAR("pow_scalar", dp::pow(x[0], s)),
      SCALAR("rpow_scalar", dp::pow(s, x[0])),
      UNARY("neg", dp::neg),
      UNARY("abs", dp::abs),
      UNARY("sign", dp::sign),
      UNARY("square", dp::square),
      UNARY("exp", dp::exp),
      UNARY("log", dp::log),
      UNARY("log1p", dp::log1p),
      UNARY("sqrt", dp::sqrt),
      UNARY("rsqrt", dp::rsqrt),
      UNARY("sin", dp::sin),
      UNARY("cos", dp::cos),
      UNARY("reciprocal", dp::reciprocal),
      UNARY("relu", dp::relu),
      UNARY("sigmoid", dp::sigmoid),
      UNARY("tanh", dp::tanh),
      UNARY("silu", dp::silu),
      UNARY("softplus", dp::softplus),
      UNARY("logical_not", dp::logical_not),
      {"gelu", [](std::vector<Tensor>& x, const Args&) { return dp::gelu(x[0]); }},
      {"gelu_tanh", [](std::vector<Tensor>& x, const Args&) { return dp::gelu(x[0], "tanh"); }},
      {"clamp", [](std::vector<Tensor>& x, const Args& a) { return dp::clamp(x[0], opt_arg(a, "min"), opt_arg(a, "max")); }},
      SCALAR("clamp_min", dp::clamp_min(x[0], s)),
      SCALAR("clamp_max", dp::clamp_max(x[0], s)),
      {"where", [](std::vector<Tensor>& x, const Args&) { return dp::where(x[0], x[1], x[2]); }},
      SCALAR("where_scalar", dp::where(x[0], x[1], s)),
      {"lerp", [](std::vector<Tensor>& x, const Args& a) { return dp::lerp(x[0], x[1], arg(a, "w")); }},
      BINARY("eq", dp::eq),
      BINARY("ne", dp::ne),
      BINARY("lt", dp::lt),
      BINARY("le", dp::le),
      BINARY("gt", dp::gt),
      BINARY("ge", dp::ge),
      SCALAR("eq_scalar", dp::eq(x[0], s)),
      SCALAR("ne_scalar", dp::ne(x[0], s)),
      SCALAR("lt_scalar", dp::lt(x[0], s)),
      SCALAR("le_scalar", dp::le(x[0], s)),
      SCALAR("gt_scalar", dp::gt(x[0], s)),
      SCALAR("ge_scalar", dp::ge(x[0], s)),
      // In place: the result is self afterwards (self may be a non-contiguous view).
      {"add_", [](std::vector<Tensor>& x, const Args& a) { return dp::add_(x[0], x[1], arg(a, "alpha")); }},
      {"add_scalar_", [](std::vector<Tensor>& x, const Args& a) { return dp::add_(x[0], arg(a, "s"), arg(a, "alpha")); }},
      {"sub_", [](std::vector<Tensor>& x, const Args& a) { return dp::sub_(x[0], x[1], arg(a, "alpha")); }},
      {"sub_scalar_", [](std::vector<Tensor>& x, const Args& a) { return dp::sub_(x[0], arg(a, "s"), arg(a, "alpha")); }},
      {"mul_", [](std::vector<Tensor>& x, const Args&) { return dp::mul_(x[0], x[1]); }},
      {"mul_scalar_", [](std::vector<Tensor>& x, const Args& a) { return dp::mul_(x[0], arg(a, "s")); }},
      {"div_", [](std::vector<Tensor>& x, const Args&) { return dp::div_(x[0], x[1]); }},
      {"div_scalar_", [](std::vector<Tensor>& x, const Args& a) { return dp::div_(x[0], arg(a, "s")); }},
      {"neg_", [](std::vector<Tensor>& x, const Args&) { return dp::neg_(x[0]); }},
      {"sqrt_", [](std::vector<Tensor>& x, const Args&) { return dp::sqrt_(x[0]); }},
      {"relu_", [](std::vector<Tensor>& x, const Args&) { return dp::relu_(x[0]); }},
      {"clamp_", [](std::vector<Tensor>& x, const Args& a) { return dp::clamp_(x[0], opt_arg(a, "min"), opt_arg(a, "max")); }},
      {"addcmul_", [](std::vector<Tensor>& x, const Args& a) { return dp::addcmul_(x[0], x[1], x[2], arg(a, "value")); }},
      {"addcdiv_", [](std::vector<Tensor>& x, const Args& a) { return dp::addcdiv_(x[0], x[1], x[2], arg(a, "value")); }},
      {"lerp_", [](std::vector<Tensor>& x, const Args& a) { return dp::lerp_(x[0], x[1], arg(a, "w")); }},
      {"fill_", [](std::vector<Tensor>& x, const Args& a) { return dp::fill_(x[0], arg(a, "s")); }},
      {"zero_", [](std::vector<Tensor>& x, const Args&) { return dp::zero_(x[0]); }},
      {"copy_", [](std::vector<Tensor>& x, const Args&) { return dp::copy_(x[0], x[1]); }},
      // torch.result_type: the output is an empty tensor of the expected dtype.
      {"result_type", [](std::vector<Tensor>& x, const Args&) { return dp::empty({0}, dp::result_type(x[0], x[1])); }},
      {"result_type_scalar", [](std::vector<Tensor>& x, const Args& a) { return dp::empty({0}, dp::result_type(x[0], arg(a, "s"))); }},
  };
  return table;
}

std::string op_of(const std::string& name) { return name.substr(0, name.find('|')); }

// Tolerance by dtype: 16-bit results may differ from PyTorch by one unit in the last place.
std::pair<double, double> tolerance(DType t) {
  switch (t) {
    case kFloat16:
      return {2e-3, 1e-3};
    case kBFloat16:
      return {1.6e-2, 1e-2};
    case kFloat32:
      return {2e-5, 1e-6};
    case kFloat64:
      return {1e-10, 1e-12};
    default:
      return {0.0, 0.0};
  }
}

std::vector<std::string> op_names() {
  std::vector<std::string> v;
  for (const auto& [k, fn] : op_table()) v.push_back(k);
  return v;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesPyTorch) {
  const std::string op = GetParam();
  const OpFn& fn = op_table().at(op);
  int ran = 0;
  for (const json& c : test::golden_file(kFile).at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    if (op_of(name) != op) continue;
    SCOPED_TRACE(name);
    ++ran;
    const bool with_grad = c.contains("grads");
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < c.at("inputs").size(); ++i) {
      const json& gi = with_grad ? c.at("grads").at(i) : json();
      Tensor t = tensor_from_json(c.at("inputs").at(i), with_grad && !gi.is_null());
      if (c.contains("views")) t = apply_view(t, c.at("views").at(i));
      inputs.push_back(t);
    }
    std::vector<Tensor> leaves = inputs;
    Tensor out = fn(inputs, c.contains("args") ? c.at("args") : json());
    Tensor expected = tensor_from_json(c.at("output"));
    EXPECT_EQ(out.dtype(), expected.dtype()) << "dtype";
    auto [rtol, atol] = tolerance(expected.dtype());
    EXPECT_TRUE(test::all_close(out, expected, rtol, atol));
    if (with_grad) {
      out.backward(tensor_from_json(c.at("grad_output")));
      for (size_t i = 0; i < leaves.size(); ++i) {
        const json& gi = c.at("grads").at(i);
        if (gi.is_null()) continue;
        SCOPED_TRACE("gradient of input " + std::to_string(i));
        Tensor g = leaves[i].grad();
        ASSERT_TRUE(g.defined());
        Tensor ge = tensor_from_json(gi);
        EXPECT_EQ(g.dtype(), ge.dtype());
        auto [grtol, gatol] = tolerance(ge.dtype());
        EXPECT_TRUE(test::all_close(g, ge, std::max(grtol, 1e-9), std::max(gatol, 1e-9)));
      }
    }
  }
  EXPECT_GT(ran, 0) << "no golden case for " << op;
}

INSTANTIATE_TEST_SUITE_P(Elementwise, Golden, ::testing::ValuesIn(op_names()), [](const auto& info) { return info.param; });

TEST(GoldenFile, EveryCaseHasAnOp) {
  std::set<std::string> seen;
  for (const json& c : test::golden_file(kFile).at("cases")) {
    const std::string op = op_of(c.at("name").get<std::string>());
    EXPECT_TRUE(op_table().count(op)) << "golden case " << c.at("name") << " names an op the test does not know";
    seen.insert(op);
  }
  EXPECT_EQ(seen.size(), op_table().size());
  EXPECT_GT(test::golden_file(kFile).at("cases").size(), 500u);
}

}  // namespace
}  // namespace dp
