// The sequence-model ops (dp/ops/sequence.h) against PyTorch (tests/golden/gen_sequence_ops.py:
// forward values and the gradients of a fixed random loss), their Tensor methods, error messages,
// edge cases (empty tensors, k = 0, dim = -1, 0-dim inputs), sort stability and NaN order on long
// rows (the threaded path), and multinomial's distribution, uniqueness and determinism.
#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>
#include "dp/amp/autocast.h"
#include "dp/dp.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_file;
using test::json;
using test::tensor_from_json;

// ---------------------------------------------------------------------------------------------
// Golden cases

Scalar scalar_arg(const json& v) {
  if (v.is_boolean()) return Scalar(v.get<bool>());
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return s == "-inf" ? Scalar(-INFINITY) : s == "inf" ? Scalar(INFINITY) : Scalar(std::nan(""));
  }
  if (v.is_number_integer()) return Scalar(v.get<int64_t>());
  return Scalar(v.get<double>());
}

std::optional<int64_t> opt_dim(const json& args) {
  if (!args.contains("dim") || args.at("dim").is_null()) return std::nullopt;
  return args.at("dim").get<int64_t>();
}

// The view a case applies to an input before the op ("t": input 0 transposed, "t1": input 1).
Tensor view_of(const Tensor& t, const json& args, int i) {
  if (!args.contains("view")) return t;
  const std::string v = args.at("view");
  if ((v == "t" && i == 0) || (v == "t1" && i == 1)) return t.transpose(-2, -1);
  return t;
}

using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&, const json&)>;

std::vector<Tensor> pair_vec(const std::pair<Tensor, Tensor>& p) { return {p.first, p.second}; }

const std::map<std::string, OpFn>& op_table() {
  static const std::map<std::string, OpFn> table = {
      {"tril", [](const std::vector<Tensor>& x, const json& a) { return std::vector<Tensor>{tril(view_of(x[0], a, 0), a.at("diagonal"))}; }},
      {"triu", [](const std::vector<Tensor>& x, const json& a) { return std::vector<Tensor>{triu(view_of(x[0], a, 0), a.at("diagonal"))}; }},
      {"sort", [](const std::vector<Tensor>& x, const json& a) { return pair_vec(sort(x[0], a.at("dim"), a.at("descending"))); }},
      {"argsort", [](const std::vector<Tensor>& x, const json& a) { return std::vector<Tensor>{argsort(x[0], a.at("dim"), a.at("descending"))}; }},
      {"topk",
       [](const std::vector<Tensor>& x, const json& a) { return pair_vec(topk(x[0], a.at("k"), a.at("dim"), a.at("largest"), a.at("sorted"))); }},
      {"cumsum", [](const std::vector<Tensor>& x, const json& a) { return std::vector<Tensor>{cumsum(view_of(x[0], a, 0), a.at("dim"))}; }},
      {"baddbmm",
       [](const std::vector<Tensor>& x, const json& a) {
         return std::vector<Tensor>{baddbmm(x[0], view_of(x[1], a, 1), x[2], scalar_arg(a.at("beta")), scalar_arg(a.at("alpha")))};
       }},
      {"einsum", [](const std::vector<Tensor>& x, const json& a) { return std::vector<Tensor>{einsum(a.at("equation").get<std::string>(), x)}; }},
      {"repeat_interleave", [](const std::vector<Tensor>& x,
                               const json& a) { return std::vector<Tensor>{repeat_interleave(x[0], a.at("repeats").get<int64_t>(), opt_dim(a))}; }},
      {"repeat_interleave_tensor",
       [](const std::vector<Tensor>& x, const json& a) { return std::vector<Tensor>{repeat_interleave(x[0], x[1], opt_dim(a))}; }},
      {"masked_fill",
       [](const std::vector<Tensor>& x, const json& a) { return std::vector<Tensor>{masked_fill(x[0], x[1], scalar_arg(a.at("value")))}; }},
      {"masked_fill_",
       [](const std::vector<Tensor>& x, const json& a) {
         // On a copy, as the generator: x * 1 keeps the gradient path to the leaf.
         Tensor y = x[0].is_floating_point() ? x[0] * 1 : x[0].clone();
         masked_fill_(y, x[1], scalar_arg(a.at("value")));
         return std::vector<Tensor>{y};
       }},
      {"gelu_tanh", [](const std::vector<Tensor>& x, const json&) { return std::vector<Tensor>{gelu(x[0], "tanh")}; }},
  };
  return table;
}

// float32 results of GEMMs and long sums differ from PyTorch's in rounding; float64 agree closely.
double rtol_for(DType t) { return t == kFloat64 ? 1e-10 : 2e-5; }
double atol_for(DType t) { return t == kFloat64 ? 1e-12 : 2e-5; }

void run_case(const json& c) {
  SCOPED_TRACE(c.at("name").get<std::string>());
  const json& args = c.at("args");
  const bool with_grad = c.contains("grads");
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.at("inputs").size(); ++i) {
    const bool rg = with_grad && !c.at("grads").at(i).is_null();
    inputs.push_back(tensor_from_json(c.at("inputs").at(i), rg));
  }
  auto it = op_table().find(c.at("op").get<std::string>());
  ASSERT_NE(it, op_table().end()) << "no op " << c.at("op");
  std::vector<Tensor> outs = it->second(inputs, args);
  const json& expected = c.at("outputs");
  ASSERT_EQ(outs.size(), expected.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    Tensor e = tensor_from_json(expected.at(i));
    EXPECT_EQ(outs[i].dtype(), e.dtype());
    const bool fp = is_floating_point(e.dtype());  // integers and bool: exact
    EXPECT_TRUE(all_close(outs[i], e, fp ? rtol_for(e.dtype()) : 0.0, fp ? atol_for(e.dtype()) : 0.0));
  }
  if (!with_grad) return;
  Tensor loss;
  for (size_t i = 0; i < outs.size(); ++i) {
    const json& w = c.at("weights").at(i);
    if (w.is_null()) continue;
    Tensor term = sum(outs[i] * tensor_from_json(w));
    loss = loss.defined() ? loss + term : term;
  }
  ASSERT_TRUE(loss.defined());
  loss.backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const json& g = c.at("grads").at(i);
    if (g.is_null()) continue;
    SCOPED_TRACE("gradient of input " + std::to_string(i));
    Tensor e = tensor_from_json(g);
    ASSERT_TRUE(inputs[i].grad().defined());
    EXPECT_TRUE(all_close(inputs[i].grad(), e, 5 * rtol_for(e.dtype()), 5 * atol_for(e.dtype())));
  }
}

// Runs every case of `op`; returns how many.
int run_cases(const std::string& op) {
  int n = 0;
  for (const json& c : golden_file("sequence_ops.json").at("cases"))
    if (c.at("op") == op) {
      run_case(c);
      ++n;
    }
  return n;
}

TEST(SequenceOpsGolden, EveryCaseHasAnOp) {
  for (const json& c : golden_file("sequence_ops.json").at("cases")) EXPECT_TRUE(op_table().count(c.at("op").get<std::string>())) << c.at("name");
}

TEST(SequenceOpsGolden, Tril) { EXPECT_GE(run_cases("tril"), 15); }
TEST(SequenceOpsGolden, Triu) { EXPECT_GE(run_cases("triu"), 15); }
TEST(SequenceOpsGolden, Sort) { EXPECT_GE(run_cases("sort"), 20); }
TEST(SequenceOpsGolden, Argsort) { EXPECT_EQ(run_cases("argsort"), 2); }
TEST(SequenceOpsGolden, Topk) { EXPECT_GE(run_cases("topk"), 20); }
TEST(SequenceOpsGolden, Cumsum) { EXPECT_GE(run_cases("cumsum"), 15); }
TEST(SequenceOpsGolden, Baddbmm) { EXPECT_GE(run_cases("baddbmm"), 10); }
TEST(SequenceOpsGolden, Einsum) { EXPECT_GE(run_cases("einsum"), 60); }
TEST(SequenceOpsGolden, RepeatInterleave) { EXPECT_GE(run_cases("repeat_interleave") + run_cases("repeat_interleave_tensor"), 20); }
TEST(SequenceOpsGolden, MaskedFill) { EXPECT_GE(run_cases("masked_fill") + run_cases("masked_fill_"), 12); }
TEST(SequenceOpsGolden, GeluTanh) { EXPECT_EQ(run_cases("gelu_tanh"), 4); }

// ---------------------------------------------------------------------------------------------
// Tensor methods: each is its free function.

TEST(SequenceOps, TensorMethodsForwardToTheOps) {
  manual_seed(3);
  Tensor x = randn({3, 5});
  EXPECT_TRUE(equal(x.tril(1), tril(x, 1)));
  EXPECT_TRUE(equal(x.triu(-1), triu(x, -1)));
  EXPECT_TRUE(equal(x.topk(2).first, topk(x, 2).first));
  EXPECT_TRUE(equal(x.topk(2, 0, false, true).second, topk(x, 2, 0, false, true).second));
  EXPECT_TRUE(equal(x.sort(0, true).first, sort(x, 0, true).first));
  EXPECT_TRUE(equal(x.argsort(1), argsort(x, 1)));
  EXPECT_TRUE(equal(x.cumsum(1), cumsum(x, 1)));
  EXPECT_TRUE(equal(x.repeat_interleave(2, 0), repeat_interleave(x, 2, 0)));
  Tensor r = tensor<int64_t>({1, 0, 2});
  EXPECT_TRUE(equal(x.repeat_interleave(r, 0), repeat_interleave(x, r, 0)));
  Tensor mask = x > 0;
  EXPECT_TRUE(equal(x.masked_fill(mask, 1.0), masked_fill(x, mask, 1.0)));
  Tensor y = x.clone();
  Tensor& ref = y.masked_fill_(mask, 1.0);
  EXPECT_EQ(&ref, &y);
  EXPECT_TRUE(equal(y, masked_fill(x, mask, 1.0)));
  Tensor s = randn({2, 3, 4}), b1 = randn({2, 3, 6}), b2 = randn({2, 6, 4});
  EXPECT_TRUE(equal(s.baddbmm(b1, b2, 0.5, 2.0), baddbmm(s, b1, b2, 0.5, 2.0)));
  Tensor p = rand({2, 6});
  Generator g1(7), g2(7);
  EXPECT_TRUE(equal(p.multinomial(3, false, &g1), multinomial(p, 3, false, &g2)));
}

// ---------------------------------------------------------------------------------------------
// Errors: the op and what was wrong.

template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(SequenceOps, TrilTriuErrors) {
  expect_error<ShapeError>([] { tril(ones({4})); }, {"tril", "at least 2 dimensions", "[4]"});
  expect_error<ShapeError>([] { triu(scalar_tensor(1.0)); }, {"triu", "at least 2 dimensions"});
  expect_error<ValueError>([] { tril(Tensor()); }, {"tril", "undefined"});
}

TEST(SequenceOps, SortTopkErrors) {
  Tensor x = randn({3, 4});
  expect_error<IndexError>([&] { topk(x, 5); }, {"topk", "k = 5", "size 4", "[3, 4]"});
  expect_error<IndexError>([&] { topk(x, 4, 0); }, {"topk", "k = 4", "size 3"});
  expect_error<IndexError>([&] { topk(x, -1); }, {"topk", "k = -1"});
  expect_error<DTypeError>([&] { topk(x > 0, 1); }, {"topk", "Bool"});
  expect_error<IndexError>([&] { sort(x, 2); }, {"sort", "Dimension out of range"});
  expect_error<IndexError>([&] { argsort(x, -3); }, {"argsort", "Dimension out of range"});
  expect_error<IndexError>([&] { topk(x, 1, 2); }, {"topk", "Dimension out of range"});
  expect_error<IndexError>([&] { cumsum(x, 2); }, {"cumsum", "Dimension out of range"});
}

TEST(SequenceOps, MultinomialErrors) {
  expect_error<ValueError>([] { multinomial(tensor({0.5, -0.1, 0.6}), 1); }, {"multinomial", "< 0", "-0.1", "[1]"});
  expect_error<ValueError>([] { multinomial(tensor({0.5, NAN, 0.6}), 1, true); }, {"multinomial", "infinity or NaN", "[1]"});
  expect_error<ValueError>([] { multinomial(tensor({0.5, 0.1, INFINITY}), 1); }, {"multinomial", "infinity or NaN", "inf"});
  expect_error<ValueError>(
      [] {
        multinomial(tensor({1.0, 2.0, 0.0, 0.0}, kFloat64).reshape({2, 2}), 1, true);
      },
      {"multinomial", "sum of probabilities <= 0", "row 1"});
  expect_error<ValueError>(
      [] {
        multinomial(tensor({0.0, 0.3, 0.0, 0.7}), 3);
      },
      {"multinomial", "replacement=False", "3 samples", "only 2 categories"});
  expect_error<ValueError>([] { multinomial(tensor({0.2, 0.8}), 3); }, {"multinomial", "without replacement", "3 samples, 2 categories"});
  expect_error<ValueError>([] { multinomial(tensor({0.2, 0.8}), 0, true); }, {"multinomial", "n_sample <= 0"});
  expect_error<ShapeError>([] { multinomial(ones({2, 2, 2}), 1); }, {"multinomial", "1 or 2 dim", "[2, 2, 2]"});
  expect_error<ShapeError>([] { multinomial(scalar_tensor(1.0), 1); }, {"multinomial", "1 or 2 dim"});
  expect_error<DTypeError>([] { multinomial(ones({3}, kInt64), 1); }, {"multinomial", "floating-point", "int64"});
  expect_error<ValueError>([] { multinomial(ones({2, 0}), 1, true); }, {"multinomial", "no categories"});
}

TEST(SequenceOps, BaddbmmErrors) {
  Tensor s = randn({2, 3, 4});
  expect_error<ShapeError>([&] { baddbmm(s, randn({3, 5}), randn({2, 5, 4})); }, {"baddbmm", "batch1 must be a 3D tensor", "[3, 5]"});
  expect_error<ShapeError>([&] { baddbmm(s, randn({2, 3, 5}), randn({5, 4})); }, {"baddbmm", "batch2 must be a 3D tensor"});
  expect_error<ShapeError>([&] { baddbmm(s, randn({2, 3, 5}), randn({2, 6, 4})); }, {"baddbmm", "[2, 5] but got: [2, 6]"});
  expect_error<ShapeError>([&] { baddbmm(randn({3, 5}), randn({2, 3, 5}), randn({2, 5, 4})); }, {"baddbmm", "self of shape [3, 5]", "[2, 3, 4]"});
  expect_error<DTypeError>([&] { baddbmm(s, randn({2, 3, 5}, kFloat64), randn({2, 5, 4})); }, {"baddbmm", "same dtype", "float64"});
  expect_error<ValueError>(
      [&] {
        baddbmm(ones({1, 1, 1}, kInt64), ones({1, 1, 1}, kInt64), ones({1, 1, 1}, kInt64), 0.5);
      },
      {"baddbmm", "beta must not be a floating point"});
}

TEST(SequenceOps, EinsumErrors) {
  Tensor a = randn({2, 3}), b = randn({3, 4});
  expect_error<ValueError>([&] { einsum("ij,jk->ik", {a}); }, {"einsum(\"ij,jk->ik\")", "2 operands but 1 tensor was given"});
  expect_error<ShapeError>([&] { einsum("ijk,jk->ik", {a, b}); }, {"einsum(\"ijk,jk->ik\")", "operand 0 has 2 dimensions", "\"ijk\" name 3"});
  expect_error<ShapeError>([&] { einsum("ij,ik->jk", {a, b}); }, {"subscript 'i' has size 2 in operand 0", "size 3 in operand 1"});
  expect_error<ValueError>([&] { einsum("ij,jk->iz", {a, b}); }, {"einsum(\"ij,jk->iz\")", "'z' does not occur"});
  expect_error<ValueError>([&] { einsum("ij,jk->ii", {a, b}); }, {"'i' occurs more than once in the output"});
  expect_error<ValueError>([&] { einsum("i1,jk->ik", {a, b}); }, {"operand 0", "invalid subscript '1'"});
  expect_error<ValueError>([&] { einsum("...i...,jk->ik", {a, b}); }, {"operand 0", "more than one ellipsis"});
  expect_error<ValueError>([&] { einsum("i.j,jk->ik", {a, b}); }, {"operand 0", "'.'"});
  expect_error<NotImplementedError>([&] { einsum("ii->i", {randn({3, 3})}); }, {"einsum(\"ii->i\")", "operand 0", "'i'", "diagonal"});
  expect_error<DTypeError>([&] { einsum("ij,jk->ik", {a, b.to(kFloat64)}); }, {"einsum", "operand 1 is float64"});
  expect_error<ValueError>([&] { einsum("ij", {}); }, {"einsum", "at least one operand"});
  expect_error<ShapeError>([&] { einsum("...ij,jk->ik", {randn({3}), b}); }, {"operand 0 has 1 dimension", "at least 2"});
}

TEST(SequenceOps, RepeatInterleaveErrors) {
  Tensor x = randn({2, 3});
  expect_error<ValueError>([&] { repeat_interleave(x, -1); }, {"repeat_interleave", "can not be negative"});
  expect_error<ValueError>([&] { repeat_interleave(x, tensor<int64_t>({1, -2}), 0); }, {"repeat_interleave", "repeats[1] = -2"});
  expect_error<ShapeError>([&] { repeat_interleave(x, tensor<int64_t>({1, 2}), 1); }, {"repeat_interleave", "same size as input", "2 elements", "3"});
  expect_error<DTypeError>([&] { repeat_interleave(x, tensor({1.0, 2.0}), 0); }, {"repeat_interleave", "int64 or int32", "float32"});
  expect_error<ShapeError>([&] { repeat_interleave(x, ones({2, 2}, kInt64), 0); }, {"repeat_interleave", "0-dim or 1-dim"});
  expect_error<IndexError>([&] { repeat_interleave(x, 2, 2); }, {"repeat_interleave", "Dimension out of range"});
}

TEST(SequenceOps, MaskedFillErrors) {
  Tensor x = randn({2, 3});
  expect_error<DTypeError>([&] { x.masked_fill_(ones({2, 3}), 0); }, {"masked_fill_", "boolean masks", "float32"});
  expect_error<ShapeError>([&] { x.masked_fill_(ones({4, 2, 3}, kBool), 0); }, {"masked_fill_", "output with shape [2, 3]", "[4, 2, 3]"});
  Tensor leaf = randn({2, 3}).set_requires_grad(true);
  expect_error<AutogradError>([&] { leaf.masked_fill_(ones({3}, kBool), 0); }, {"masked_fill_"});
  Tensor expanded = randn({3}).expand({2, 3});
  expect_error<ValueError>([&] { expanded.masked_fill_(ones({3}, kBool), 0); }, {"masked_fill_", "more than one element"});
  expect_error<DTypeError>([&] { masked_fill(x, ones({3}, kInt64), 0); }, {"masked_fill", "boolean masks"});
}

// ---------------------------------------------------------------------------------------------
// Edge cases

TEST(SequenceOps, EmptyAndZeroDim) {
  auto [v, i] = sort(zeros({0}));
  EXPECT_EQ(v.sizes(), Shape({0}));
  EXPECT_EQ(i.dtype(), kInt64);
  auto [tv, ti] = topk(zeros({3, 0}), 0);
  EXPECT_EQ(tv.sizes(), Shape({3, 0}));
  auto [kv, ki] = topk(randn({3, 4}), 0, 0);
  EXPECT_EQ(kv.sizes(), Shape({0, 4}));
  EXPECT_EQ(ki.sizes(), Shape({0, 4}));
  EXPECT_EQ(cumsum(zeros({0, 3}), 0).sizes(), Shape({0, 3}));
  Tensor c0 = cumsum(scalar_tensor(2.5), 0);
  EXPECT_EQ(c0.dim(), 0);
  EXPECT_DOUBLE_EQ(c0.item<double>(), 2.5);
  EXPECT_EQ(cumsum(scalar_tensor(int64_t{3}, kInt32), -1).dtype(), kInt64);
  EXPECT_EQ(tril(zeros({0, 0})).sizes(), Shape({0, 0}));
  EXPECT_EQ(triu(zeros({2, 0, 5})).sizes(), Shape({2, 0, 5}));
  EXPECT_EQ(repeat_interleave(zeros({0, 2}), 3, 0).sizes(), Shape({0, 2}));
  EXPECT_EQ(repeat_interleave(zeros({0, 2}), tensor<int64_t>(std::vector<int64_t>{}), 0).sizes(), Shape({0, 2}));
  EXPECT_EQ(multinomial(ones({0, 3}), 2).sizes(), Shape({0, 2}));
  EXPECT_EQ(einsum("ij,jk->ik", {zeros({0, 3}), zeros({3, 2})}).sizes(), Shape({0, 2}));
  Tensor b = baddbmm(zeros({0, 2, 3}), zeros({0, 2, 4}), zeros({0, 4, 3}));
  EXPECT_EQ(b.sizes(), Shape({0, 2, 3}));
  // 0-dim input: topk k in {0, 1}, dim 0 or -1.
  auto [zv, zi] = topk(scalar_tensor(1.5), 1, 0);
  EXPECT_EQ(zv.dim(), 0);
  EXPECT_EQ(zi.item<int64_t>(), 0);
  auto [z0v, z0i] = topk(scalar_tensor(1.5), 0);  // PyTorch's quirk: the element, for k = 0 too
  EXPECT_EQ(z0v.item<double>(), 1.5);
  EXPECT_EQ(z0i.item<int64_t>(), 0);
  expect_error<IndexError>([] { topk(scalar_tensor(1.5), 2); }, {"topk", "k = 2", "size 1"});
  expect_error<IndexError>([] { repeat_interleave(scalar_tensor(1.5), 2, 0); }, {"repeat_interleave", "no dimensions"});
  EXPECT_EQ(repeat_interleave(scalar_tensor(1.5), tensor<int64_t>({2})).sizes(), Shape({2}));
}

TEST(SequenceOps, TrilHugeDiagonalAndDtypes) {
  Tensor x = randn({3, 4});
  EXPECT_TRUE(equal(tril(x, std::numeric_limits<int64_t>::max()), x));
  EXPECT_TRUE(equal(tril(x, std::numeric_limits<int64_t>::min()), zeros({3, 4})));
  EXPECT_TRUE(equal(triu(x, std::numeric_limits<int64_t>::min()), x));
  EXPECT_TRUE(equal(triu(x, std::numeric_limits<int64_t>::max()), zeros({3, 4})));
  // Every dtype, a non-contiguous input.
  for (DType t : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor y = ones({4, 3}, t).t();
    Tensor l = tril(y);
    EXPECT_EQ(l.dtype(), t);
    std::vector<double> v = l.to_vector<double>();
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(v[i * 4 + j], j <= i ? 1.0 : 0.0);
  }
}

TEST(SequenceOps, EinsumIdentityIsAView) {
  Tensor x = randn({2, 3});
  Tensor y = einsum("ij->ij", {x});
  EXPECT_FALSE(y.is_same(x));
  EXPECT_EQ(y.data_ptr(), x.data_ptr());
  EXPECT_TRUE(equal(y, x));
  Tensor t = einsum("ij->ji", {x});
  EXPECT_EQ(t.data_ptr(), x.data_ptr());  // a transposed view, as PyTorch's
  EXPECT_TRUE(equal(t, x.t()));
}

TEST(SequenceOps, RepeatInterleaveReturnsANewTensor) {
  Tensor x = randn({2, 3});
  Tensor r = repeat_interleave(x, 1, 1);
  EXPECT_TRUE(equal(r, x));
  r.fill_(0.0);
  EXPECT_FALSE(equal(r, x));
  Tensor flat = repeat_interleave(x, 1);
  EXPECT_EQ(flat.sizes(), Shape({6}));
  flat.fill_(0.0);
  EXPECT_FALSE(equal(flat.reshape({2, 3}), x));
}

TEST(SequenceOps, MaskedFillInPlaceBumpsTheVersionAndKeepsHistory) {
  Tensor leaf = randn({2, 3}).set_requires_grad(true);
  Tensor y = leaf * 2;
  const uint32_t v0 = y.version();
  Tensor mask = tensor<bool>({true, false, true});
  y.masked_fill_(mask, 0.0);
  EXPECT_GT(y.version(), v0);
  EXPECT_EQ(y.grad_fn()->name(), "MaskedFillBackward0");
  y.sum().backward();
  EXPECT_TRUE(equal(leaf.grad(), tensor({0.0, 2.0, 0.0, 0.0, 2.0, 0.0}).reshape({2, 3})));
  // A tensor saved for backward and then filled in place: the saved-tensor version check.
  Tensor a = randn({3}).set_requires_grad(true);
  Tensor b = a * 1;
  Tensor c = b * b;  // saves b
  b.masked_fill_(tensor<bool>({true, false, false}), 1.0);
  EXPECT_THROW(c.sum().backward(), AutogradError);
}

TEST(SequenceOps, BaddbmmAutocastRunsInBFloat16) {
  Tensor s = randn({2, 3, 4}), b1 = randn({2, 3, 5}), b2 = randn({2, 5, 4});
  autocast::Guard guard(DeviceType::CPU);
  Tensor out = baddbmm(s, b1, b2);
  EXPECT_EQ(out.dtype(), kBFloat16);
}

// ---------------------------------------------------------------------------------------------
// sort / topk on long rows: stability, NaN order and the threaded path, against std::stable_sort.

// The stable order of a row (NaN largest), as PyTorch documents it.
std::vector<int64_t> reference_order(const std::vector<double>& row, bool descending) {
  std::vector<int64_t> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto key_less = [](double a, double b) { return a < b || (!std::isnan(a) && std::isnan(b)); };
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return descending ? key_less(row[b], row[a]) : key_less(row[a], row[b]); });
  return idx;
}

void check_sorted_rows(const Tensor& x, bool descending) {
  SCOPED_TRACE(std::string(dtype_name(x.dtype())) + (descending ? " descending" : " ascending"));
  const int64_t rows = x.size(0), n = x.size(1);
  auto [v, i] = sort(x, 1, descending);
  std::vector<double> xs = x.to_vector<double>(), vs = v.to_vector<double>();
  std::vector<int64_t> is = i.to_vector<int64_t>();
  int mismatches = 0;
  for (int64_t r = 0; r < rows && mismatches < 5; ++r) {
    std::vector<double> row(xs.begin() + r * n, xs.begin() + (r + 1) * n);
    std::vector<int64_t> ref = reference_order(row, descending);
    for (int64_t j = 0; j < n; ++j) {
      if (is[r * n + j] != ref[j]) {
        ADD_FAILURE() << "row " << r << " position " << j << ": index " << is[r * n + j] << ", expected " << ref[j];
        ++mismatches;
        break;
      }
      const double a = vs[r * n + j], e = row[ref[j]];
      if (!(a == e || (std::isnan(a) && std::isnan(e)))) {
        ADD_FAILURE() << "row " << r << " position " << j << ": value " << a << ", expected " << e;
        ++mismatches;
        break;
      }
    }
  }
  if (x.dtype() == kBool) return;  // no topk for bool (as PyTorch)
  // topk is the sorted prefix, ties included (both take equal values in index order).
  for (int64_t k : {int64_t{1}, int64_t{7}, n / 3}) {
    auto [tv, ti] = topk(x, k, 1, descending, true);
    EXPECT_TRUE(equal(ti, i.narrow(1, 0, k))) << "k = " << k;
    auto [uv, ui] = topk(x, k, 1, descending, false);  // unsorted: the same set
    EXPECT_TRUE(equal(std::get<0>(sort(ui, 1)), std::get<0>(sort(ti, 1)))) << "unsorted k = " << k;
  }
}

TEST(SequenceOps, SortIsStableWithNaNLargestOnLongRows) {
  manual_seed(11);
  // 40 rows of 6000 values from {0..9} and NaN: many ties; large enough for several threads.
  Tensor base = randint(0, 11, {40, 6000}).to(kFloat64);
  Tensor xd = where(base == 10, full({40, 6000}, NAN, kFloat64), base);
  for (DType t : {kFloat32, kFloat64, kBFloat16}) {
    for (bool desc : {false, true}) check_sorted_rows(xd.to(t), desc);
  }
  Tensor xi = randint(-5, 5, {40, 6000});
  for (DType t : {kInt64, kInt32, kUInt8}) {
    Tensor y = t == kUInt8 ? (xi + 5).to(t) : xi.to(t);
    for (bool desc : {false, true}) check_sorted_rows(y, desc);
  }
  check_sorted_rows(randint(0, 2, {8, 5000}).to(kBool), false);
  // Signed zeros are equal (index order), infinities in place.
  Tensor z = tensor({0.0, -0.0, INFINITY, -INFINITY, NAN, -0.0, 0.0});
  auto [v, i] = sort(z);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 1, 5, 6, 2, 4}));
  EXPECT_TRUE(std::signbit(v.to_vector<double>()[2]));  // the values are the input's, -0.0 kept
}

TEST(SequenceOps, SortAlongAnInnerDimAndNonContiguousInput) {
  manual_seed(12);
  Tensor x = randint(0, 5, {3, 300, 4}).to(kFloat32);
  auto [v, i] = sort(x, 1, true);
  auto [vt, it] = sort(x.transpose(1, 2).contiguous(), 2, true);
  EXPECT_TRUE(equal(v, vt.transpose(1, 2)));
  EXPECT_TRUE(equal(i, it.transpose(1, 2)));
  auto [vn, in] = sort(x.transpose(1, 2), -1, true);  // a non-contiguous input
  EXPECT_TRUE(equal(vn, vt));
  EXPECT_TRUE(equal(in, it));
  EXPECT_TRUE(equal(gather(x, 1, i), v));
}

TEST(SequenceOps, CumsumOnLongRowsAndInnerDims) {
  manual_seed(13);
  Tensor x = randn({64, 5000}, kFloat64);
  Tensor c = cumsum(x, 1);
  std::vector<double> xs = x.to_vector<double>(), cs = c.to_vector<double>();
  double err = 0;
  for (int64_t r = 0; r < 64; ++r) {
    double s = 0;
    for (int64_t j = 0; j < 5000; ++j) {
      s += xs[r * 5000 + j];
      err = std::max(err, std::fabs(cs[r * 5000 + j] - s));
    }
  }
  EXPECT_LT(err, 1e-9);
  // Along dim 0 (inner = 5000 columns in 256-wide blocks) it is the transposed problem.
  EXPECT_TRUE(allclose(cumsum(x.t().contiguous(), 0), c.t(), 1e-12, 1e-12));
  // float32 accumulates in float64: one rounding per output.
  Tensor f = full({1, 100000}, 0.1, kFloat32);
  EXPECT_FLOAT_EQ(cumsum(f, 1).to_vector<float>().back(), static_cast<float>(100000 * static_cast<double>(0.1f)));
}

// ---------------------------------------------------------------------------------------------
// multinomial: distribution (chi-square), without-replacement uniqueness, determinism.

// Pearson's chi-square statistic of observed counts against expected probabilities (cells with
// probability 0 must have count 0).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t total) {
  double chi = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    if (p[c] == 0) {
      EXPECT_EQ(counts[c], 0) << "category " << c << " has probability 0";
      continue;
    }
    const double e = p[c] * static_cast<double>(total);
    chi += (counts[c] - e) * (counts[c] - e) / e;
  }
  return chi;
}

// Chi-square quantiles for a false-failure probability of about 1e-7 (chi2.isf(1e-7, k): upper
// tail probabilities 1.0e-7 to 1.3e-7).
double chi_square_bound(int dof) {
  static const std::map<int, double> bound = {{2, 32.24}, {3, 35.08}, {4, 37.73}, {5, 40.25}, {9, 49.64}};
  return bound.at(dof);
}

TEST(SequenceOps, MultinomialWithReplacementFollowsTheDistribution) {
  manual_seed(21);
  const std::vector<double> w = {1.0, 2.0, 0.0, 3.0, 4.0};  // unnormalised, one zero
  const double total_w = 10.0;
  for (DType t : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor p = tensor<double>(w).to(t);
    const int64_t n = 100000;
    Tensor s = multinomial(p, n, true);
    ASSERT_EQ(s.sizes(), Shape({n}));
    ASSERT_EQ(s.dtype(), kInt64);
    std::vector<int64_t> counts(5, 0);
    for (int64_t v : s.to_vector<int64_t>()) {
      ASSERT_TRUE(v >= 0 && v < 5);
      ++counts[v];
    }
    std::vector<double> pn;
    for (double x : w) pn.push_back(x / total_w);
    EXPECT_LT(chi_square(counts, pn, n), chi_square_bound(3));
  }
  // A row of several 64-category blocks, zeros around the block edges: the block search.
  {
    std::vector<double> wb(130, 0.0);
    const std::vector<std::pair<int, double>> nz = {{1, 1.0}, {62, 2.0}, {65, 0.5}, {100, 1.5}, {127, 3.0}, {129, 2.0}};
    for (auto [c, v] : nz) wb[c] = v;
    const int64_t n = 100000;
    std::vector<int64_t> counts(130, 0);
    for (int64_t v : multinomial(tensor<double>(wb), n, true).to_vector<int64_t>()) ++counts[v];
    std::vector<double> pb;
    for (double x : wb) pb.push_back(x / 10.0);
    EXPECT_LT(chi_square(counts, pb, n), chi_square_bound(5));
  }
  // 2-D: each row its own distribution.
  Tensor p2 = tensor({0.9, 0.1, 0.0, 0.0, 0.5, 0.5, 0.2, 0.3, 0.5}).reshape({3, 3});
  Tensor s2 = multinomial(p2, 30000, true);
  ASSERT_EQ(s2.sizes(), Shape({3, 30000}));
  std::vector<int64_t> v2 = s2.to_vector<int64_t>();
  std::vector<double> pv = p2.to_vector<double>();
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<int64_t> counts(3, 0);
    for (int64_t j = 0; j < 30000; ++j) ++counts[v2[r * 30000 + j]];
    const std::vector<double> pr(pv.begin() + r * 3, pv.begin() + r * 3 + 3);
    const int dof = static_cast<int>(std::count_if(pr.begin(), pr.end(), [](double x) { return x > 0; })) - 1;
    EXPECT_LT(chi_square(counts, pr, 30000), chi_square_bound(std::max(dof, 2))) << "row " << r;
  }
}

TEST(SequenceOps, MultinomialWithoutReplacement) {
  manual_seed(22);
  // Unique indices per row; all categories when num_samples == C; zeros never drawn.
  Tensor p = rand({50, 10});
  Tensor s = multinomial(p, 10, false);
  std::vector<int64_t> v = s.to_vector<int64_t>();
  for (int64_t r = 0; r < 50; ++r) {
    std::set<int64_t> seen(v.begin() + r * 10, v.begin() + (r + 1) * 10);
    EXPECT_EQ(seen.size(), 10u) << "row " << r;
  }
  Tensor pz = tensor({0.0, 0.5, 0.0, 0.25, 0.25});
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<int64_t> d = multinomial(pz, 3).to_vector<int64_t>();
    std::set<int64_t> seen(d.begin(), d.end());
    EXPECT_EQ(seen, (std::set<int64_t>{1, 3, 4}));
  }
  // The first draw follows p; the second follows sum_i p_i p_j / (1 - p_i) (i != j).
  const std::vector<double> w = {0.4, 0.3, 0.2, 0.1};
  const int64_t rows = 40000;
  Tensor pr = tensor<double>(w).to(kFloat32).reshape({1, 4}).expand({rows, 4}).contiguous();
  Tensor d = multinomial(pr, 2, false);
  std::vector<int64_t> dv = d.to_vector<int64_t>();
  std::vector<int64_t> first(4, 0), second(4, 0);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_NE(dv[2 * r], dv[2 * r + 1]);
    ++first[dv[2 * r]];
    ++second[dv[2 * r + 1]];
  }
  std::vector<double> p2(4, 0.0);
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i)
      if (i != j) p2[j] += w[i] * w[j] / (1 - w[i]);
  EXPECT_LT(chi_square(first, w, rows), chi_square_bound(3));
  EXPECT_LT(chi_square(second, p2, rows), chi_square_bound(3));
}

TEST(SequenceOps, MultinomialIsReproducibleUnderASeed) {
  Tensor p = rand({4, 100});
  for (bool repl : {true, false}) {
    manual_seed(5);
    Tensor a = multinomial(p, 20, repl);
    Tensor b = multinomial(p, 20, repl);  // the generator moved on
    manual_seed(5);
    Tensor c = multinomial(p, 20, repl);
    EXPECT_TRUE(equal(a, c));
    EXPECT_FALSE(equal(a, b));
    Generator g1(99), g2(99);
    EXPECT_TRUE(equal(multinomial(p, 20, repl, &g1), multinomial(p, 20, repl, &g2)));
    // float64 probabilities with the same values draw the same samples.
    Generator g3(99), g4(99);
    EXPECT_TRUE(equal(multinomial(p, 20, repl, &g3), multinomial(p.to(kFloat64), 20, repl, &g4)));
  }
  // The threaded path (many rows) draws what one row at a time draws.
  Tensor big = rand({256, 2000});
  Generator g5(4), g6(4);
  Tensor all = multinomial(big, 3, true, &g5);
  Tensor first_rows = multinomial(big.narrow(0, 0, 10), 3, true, &g6);
  EXPECT_TRUE(equal(all.narrow(0, 0, 10), first_rows));
}

}  // namespace
}  // namespace dp
