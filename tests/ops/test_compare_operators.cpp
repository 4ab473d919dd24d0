// Tensor's comparison operators (== != < <= > >=, tensor-tensor, tensor-scalar, scalar-tensor) and
// the logical / bit-wise ops and operators (~ & | ^) against PyTorch 1.13
// (tests/golden/compare_operators.json, written by tests/golden/gen_compare_operators.py): Bool
// results, broadcasting, type promotion across dtypes, NaN and signed zeros; then the errors.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include "support/cuda.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::json;
using test::tensor_from_json;

const char* kFile = "compare_operators.json";

Scalar scalar_of(const json& v) {
  if (v.is_boolean()) return Scalar(v.get<bool>());
  if (v.is_number_integer()) return Scalar(v.get<int64_t>());
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return Scalar(std::numeric_limits<double>::quiet_NaN());
    return Scalar(s == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity());
  }
  return Scalar(v.get<double>());
}

using Fn = std::function<Tensor(const std::vector<Tensor>&, const Scalar&)>;

// "<op>|<form>" -> the C++ expression a libtorch user writes.
#define TT(key, expr)                                                           \
  {                                                                             \
    key "|tt", [](const std::vector<Tensor>& x, const Scalar&) { return expr; } \
  }
#define TS(key, expr)                                                             \
  {                                                                               \
    key "|ts", [](const std::vector<Tensor>& x, const Scalar& s) { return expr; } \
  }
#define ST(key, expr)                                                             \
  {                                                                               \
    key "|st", [](const std::vector<Tensor>& x, const Scalar& s) { return expr; } \
  }
#define T1(key, expr)                                                          \
  {                                                                            \
    key "|t", [](const std::vector<Tensor>& x, const Scalar&) { return expr; } \
  }

const std::map<std::string, Fn>& table() {
  static const std::map<std::string, Fn> t = {
      TT("eq", x[0] == x[1]),
      TT("ne", x[0] != x[1]),
      TT("lt", x[0] < x[1]),
      TT("le", x[0] <= x[1]),
      TT("gt", x[0] > x[1]),
      TT("ge", x[0] >= x[1]),
      TS("eq", x[0] == s),
      TS("ne", x[0] != s),
      TS("lt", x[0] < s),
      TS("le", x[0] <= s),
      TS("gt", x[0] > s),
      TS("ge", x[0] >= s),
      ST("eq", s == x[0]),
      ST("ne", s != x[0]),
      ST("lt", s < x[0]),
      ST("le", s <= x[0]),
      ST("gt", s > x[0]),
      ST("ge", s >= x[0]),
      TT("and", x[0] & x[1]),
      TT("or", x[0] | x[1]),
      TT("xor", x[0] ^ x[1]),
      T1("invert", ~x[0]),
      TT("logical_and", x[0].logical_and(x[1])),
      TT("logical_or", x[0].logical_or(x[1])),
      TT("logical_xor", dp::logical_xor(x[0], x[1])),
      T1("logical_not", x[0].logical_not()),
  };
  return t;
}

// The "masks" cases build their operands from one tensor in Python: (a > 0) OP (a < 1).
Tensor masks_case(const std::string& op, const Tensor& a) {
  if (op == "and") return (a > 0) & (a < 1);
  if (op == "or") return (a > 0) | (a < 1);
  return (a > 0) ^ (a < 1);
}
// "invert|t|mask" is ~(a >= 0).
Tensor invert_mask_case(const Tensor& a) { return ~(a >= 0); }

TEST(CompareOperators, MatchPyTorchGoldens) {
  const json& file = test::golden_file(kFile);
  int checked = 0;
  for (const json& c : file.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string op = name.substr(0, name.find('|'));
    const std::string form = name.substr(0, name.rfind('|'));
    const std::string variant = name.substr(name.rfind('|') + 1);
    std::vector<Tensor> x;
    for (const json& t : c.at("inputs")) x.push_back(tensor_from_json(t));
    const Scalar s = c.contains("args") ? scalar_of(c.at("args").at("s")) : Scalar(0);
    Tensor out;
    if (variant == "masks")
      out = masks_case(op, x[0]);
    else if (name == "invert|t|mask")
      out = invert_mask_case(x[0]);
    else {
      auto it = table().find(form);
      ASSERT_NE(it, table().end()) << "no C++ expression for " << name;
      out = it->second(x, s);
    }
    const Tensor expected = tensor_from_json(c.at("output"));
    ASSERT_EQ(out.dtype(), kBool) << name;
    ASSERT_EQ(out.sizes(), expected.sizes()) << name;
    EXPECT_EQ(out.to_vector<uint8_t>(), expected.to_vector<uint8_t>()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 133);  // every case of the file ran (update with the generator)
}

// The operators are the functional ops: same values, and 0 OP t mirrors t's comparison.
TEST(CompareOperators, OperatorsAreTheFunctionalOps) {
  const Tensor a = tensor({-1.0, 0.0, 2.0, NAN}), b = tensor({-1.0, 1.0, 1.0, NAN});
  EXPECT_TRUE(equal(a == b, eq(a, b)));
  EXPECT_TRUE(equal(a != b, ne(a, b)));
  EXPECT_TRUE(equal(a < b, lt(a, b)));
  EXPECT_TRUE(equal(a <= b, le(a, b)));
  EXPECT_TRUE(equal(a > b, gt(a, b)));
  EXPECT_TRUE(equal(a >= b, ge(a, b)));
  EXPECT_TRUE(equal(0 < a, gt(a, 0)));
  EXPECT_TRUE(equal(0 >= a, le(a, 0)));
  EXPECT_TRUE(equal(a.ge(b), ge(a, b)));
  EXPECT_TRUE(equal(a.le(0.0), le(a, 0.0)));
  EXPECT_TRUE(equal(a.ne(b), ne(a, b)));
}

// operator== is element-wise (a Bool tensor), never the identity of two handles, which is is_same.
TEST(CompareOperators, EqualityIsElementwiseNotIdentity) {
  static_assert(std::is_same_v<decltype(std::declval<Tensor>() == std::declval<Tensor>()), Tensor>);
  static_assert(std::is_same_v<decltype(std::declval<Tensor>() != 1), Tensor>);
  static_assert(std::is_same_v<decltype(2.5 > std::declval<Tensor>()), Tensor>);
  static_assert(!std::is_convertible_v<Tensor, bool>, "no implicit truth value of a tensor (libtorch has none either)");
  const Tensor a = tensor({1.0, 2.0});
  const Tensor alias = a;
  const Tensor copy = a.clone();
  EXPECT_TRUE(alias.is_same(a));
  EXPECT_FALSE(copy.is_same(a));
  // Equal values compare equal whether or not the handles alias.
  EXPECT_EQ((copy == a).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ((alias == a).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1}));
  // A NaN never equals itself, even in the very same tensor.
  const Tensor n = tensor({NAN, 1.0});
  EXPECT_EQ((n == n).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ((n != n).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0}));
}

TEST(CompareOperators, ResultsAreNotDifferentiable) {
  Tensor a = tensor({1.0, -2.0}).set_requires_grad(true);
  const Tensor m = a > 0;
  EXPECT_FALSE(m.requires_grad());
  EXPECT_FALSE((m & (a < 5)).requires_grad());
  EXPECT_FALSE(logical_or(a, a).requires_grad());
}

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

TEST(CompareOperators, ShapeMismatchNamesOpAndShapes) {
  const Tensor a = zeros({2, 3}), b = zeros({4});
  const std::pair<const char*, std::function<Tensor()>> cases[] = {
      {"eq", [&] { return a == b; }}, {"ne", [&] { return a != b; }}, {"lt", [&] { return a < b; }},
      {"le", [&] { return a <= b; }}, {"gt", [&] { return a > b; }},  {"ge", [&] { return a >= b; }},
  };
  for (const auto& [op, f] : cases) {
    const std::string msg = message_of<ShapeError>(f);
    EXPECT_NE(msg.find(op), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  }
  const Tensor m = zeros({2, 3}, kBool), n = zeros({4}, kBool);
  const std::pair<const char*, std::function<Tensor()>> bool_cases[] = {
      {"bitwise_and", [&] { return m & n; }},
      {"bitwise_or", [&] { return m | n; }},
      {"bitwise_xor", [&] { return m ^ n; }},
      {"logical_and", [&] { return logical_and(a, n); }},
      {"logical_xor", [&] { return logical_xor(m, b); }},
  };
  for (const auto& [op, f] : bool_cases) {
    const std::string msg = message_of<ShapeError>(f);
    EXPECT_NE(msg.find(op), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  }
}

TEST(CompareOperators, BitwiseOperatorsNeedBoolTensors) {
  const Tensor f = tensor({1.0, 0.0}), m = tensor({1.0, 0.0}) > 0;
  const Tensor i = zeros({2}, kInt64);
  std::string msg = message_of<DTypeError>([&] { return f & m; });
  EXPECT_NE(msg.find("bitwise_and"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Float"), std::string::npos) << msg;
  msg = message_of<DTypeError>([&] { return m | i; });
  EXPECT_NE(msg.find("bitwise_or"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Long"), std::string::npos) << msg;
  msg = message_of<DTypeError>([&] { return i ^ i; });
  EXPECT_NE(msg.find("bitwise_xor"), std::string::npos) << msg;
  msg = message_of<DTypeError>([&] { return ~f; });
  EXPECT_NE(msg.find("bitwise_not"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
}

TEST(CompareOperators, UndefinedOperandIsAnError) {
  const Tensor a = zeros({2}), u;
  EXPECT_THROW(a == u, Error);
  EXPECT_THROW(u < 1, Error);
  EXPECT_THROW(u & u, Error);
}

// On a GPU the operators run the CUDA instantiations of the same kernels: same Bool results,
// including a CPU 0-dim operand meeting a CUDA tensor (PyTorch's scalar-tensor rule).
TEST(CompareOperators, CudaMatchesCpu) {
  DP_REQUIRE_GPU();
  const Tensor a = tensor({-1.0, 0.0, 2.0, NAN, 0.5, -0.0}), b = tensor({-1.0, 1.0, 1.0, NAN, 0.25, 0.0});
  const Tensor ga = a.to(Device::cuda(0)), gb = b.to(Device::cuda(0));
  auto same = [](const Tensor& gpu, const Tensor& cpu) {
    EXPECT_TRUE(gpu.is_cuda());
    EXPECT_EQ(gpu.dtype(), kBool);
    EXPECT_EQ(gpu.cpu().to_vector<uint8_t>(), cpu.to_vector<uint8_t>());
  };
  same(ga == gb, a == b);
  same(ga != gb, a != b);
  same(ga < gb, a < b);
  same(ga >= 0.5, a >= 0.5);
  same(0 < ga, 0 < a);
  same((ga > 0) & (gb < 1), (a > 0) & (b < 1));
  same((ga > 0) | (gb < 1), (a > 0) | (b < 1));
  same((ga > 0) ^ (gb < 1), (a > 0) ^ (b < 1));
  same(~(ga > 0), ~(a > 0));
  same(logical_and(ga, gb), logical_and(a, b));
  same(ga > scalar_tensor(0.25), a > scalar_tensor(0.25));  // CPU 0-dim operand
}

}  // namespace
}  // namespace dp
