// Every case of tests/golden/reduction.json (written by PyTorch 1.13, tests/golden/gen_reduction.py)
// run through dparallel: values, dtypes and shapes of the outputs, and, where the case has them,
// the gradients of sum(output * grad_output) w.r.t. the (possibly non-contiguous) input.
#include <gtest/gtest.h>
#include <cmath>
#include "backend/cpu/reduce.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_case;
using test::golden_file;
using test::json;
using test::tensor_from_json;

const char* kFile = "reduction.json";

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const json& c : golden_file(kFile).at("cases")) names.push_back(c.at("name").get<std::string>());
  return names;
}

DType dtype_named(const std::string& name) {
  for (DType d : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (name == dtype_name(d)) return d;
  throw std::runtime_error("unknown dtype " + name);
}

// x[i] = float32(((i * 7919) % 10007) / 10007 - 0.3), as the generator builds it.
Tensor generated_input(const Shape& shape) {
  const int64_t n = numel_of(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<double>((i * 7919) % 10007) / 10007.0 - 0.3);
  return tensor<float>(v, shape);
}

// The generator's non-contiguous views, built over the same storage.
Tensor apply_view(const Tensor& x, const json& c) {
  if (!c.contains("view")) return x;
  const json& v = c.at("view");
  Shape sizes = x.sizes(), strides = x.strides();
  if (v.contains("permute")) {
    Shape perm = v.at("permute").get<Shape>();
    Shape s2, st2;
    for (int64_t p : perm) {
      s2.push_back(sizes[p]);
      st2.push_back(strides[p]);
    }
    sizes = s2;
    strides = st2;
  } else {
    const Shape ds = v.at("step").get<Shape>();
    sizes[ds[0]] = (sizes[ds[0]] + ds[1] - 1) / ds[1];
    strides[ds[0]] *= ds[1];
  }
  Tensor r = backend::restride_nograd(x, sizes, strides);
  EXPECT_FALSE(r.is_contiguous() && r.numel() > 1) << "the view of case " << c.at("name") << " should be non-contiguous";
  return r;
}

Shape dims_arg(const json& a) { return a.at("dims").get<Shape>(); }

std::vector<Tensor> run_op(const std::string& op, const Tensor& x, const json& a) {
  auto has = [&](const char* k) { return a.contains(k) && !a.at(k).is_null(); };
  const bool keepdim = a.value("keepdim", false);
  if (op == "sum") {
    std::optional<DType> dt;
    if (has("dtype")) dt = dtype_named(a.at("dtype").get<std::string>());
    return {has("dims") ? sum(x, dims_arg(a), keepdim, dt) : sum(x, dt)};
  }
  if (op == "mean") return {has("dims") ? mean(x, dims_arg(a), keepdim) : mean(x)};
  if (op == "sum_to") return {sum_to(x, a.at("shape").get<Shape>())};
  if (op == "max_all") return {max(x)};
  if (op == "min_all") return {min(x)};
  if (op == "max_dim" || op == "min_dim") {
    auto [v, i] = op == "max_dim" ? max(x, a.at("dim").get<int64_t>(), keepdim) : min(x, a.at("dim").get<int64_t>(), keepdim);
    return {v, i};
  }
  if (op == "amax") return {amax(x, dims_arg(a), keepdim)};
  if (op == "argmax" || op == "argmin") {
    std::optional<int64_t> dim;
    if (has("dim")) dim = a.at("dim").get<int64_t>();
    return {op == "argmax" ? argmax(x, dim, keepdim) : argmin(x, dim, keepdim)};
  }
  if (op == "var") return {var(x, dims_arg(a), a.at("correction").get<int64_t>(), keepdim)};
  if (op == "std") return {dp::std(x, dims_arg(a), a.at("correction").get<int64_t>(), keepdim)};
  if (op == "logsumexp") return {logsumexp(x, dims_arg(a), keepdim)};
  if (op == "norm") {
    const json& p = a.at("p");
    double pv = p.is_string() ? (p.get<std::string>() == "inf" ? INFINITY : -INFINITY) : p.get<double>();
    return {norm(x, pv)};
  }
  if (op == "softmax") return {softmax(x, a.at("dim").get<int64_t>())};
  if (op == "log_softmax") return {log_softmax(x, a.at("dim").get<int64_t>())};
  throw std::runtime_error("unknown op " + op);
}

struct Tol {
  double rtol, atol;
};

Tol tolerance(DType dt, const std::string& op) {
  switch (dt) {
    case kFloat64:
      return {1e-10, 1e-12};
    case kFloat16:
      return {2e-3, 1e-3};
    case kBFloat16:
      return {1e-2, 1e-2};
    case kFloat32:
      return {op == "var" || op == "std" ? 2e-5 : 1e-5, 1e-6};
    default:
      return {0, 0};
  }
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesPyTorch) {
  const json& c = golden_case(kFile, GetParam());
  const std::string op = c.at("op").get<std::string>();
  const json& args = c.at("args");
  const bool generated = c.contains("generated");
  Tensor x = generated ? generated_input(c.at("generated").get<Shape>()) : tensor_from_json(c.at("inputs")[0]);
  Tensor v = apply_view(x, c);
  const bool with_grad = c.contains("grads");
  if (with_grad) v = (c.contains("view") ? v : x.detach().clone()).requires_grad_(true);

  std::vector<Tensor> outs = run_op(op, v, args);
  std::vector<json> expected;
  if (c.at("output").is_array()) {
    for (const json& e : c.at("output")) expected.push_back(e);
  } else {
    expected.push_back(c.at("output"));
  }
  ASSERT_EQ(outs.size(), expected.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    const DType want = dtype_named(expected[k].at("dtype").get<std::string>());
    EXPECT_EQ(outs[k].dtype(), want) << "output " << k;
    Tol t = tolerance(want, op);
    // On millions of elements PyTorch's float32 accumulation itself drifts (its norm by ~1e-5);
    // the float64 result ("exact") below is the tight reference.
    if (generated) t.rtol = 5e-5;
    EXPECT_TRUE(all_close(outs[k], expected[k], t.rtol, t.atol)) << "output " << k;
  }
  if (generated && c.contains("exact")) {
    // Against the float64 result: our float32 reductions accumulate in double.
    EXPECT_TRUE(all_close(outs[0], c.at("exact"), 2e-7, 1e-6)) << "vs the float64 computation";
  }
  if (with_grad) {
    Tensor go = tensor_from_json(c.at("grad_output"));
    std::vector<Tensor> g = autograd::grad({outs[0]}, {v}, {go});
    ASSERT_TRUE(g[0].defined());
    const Tol t = tolerance(v.dtype(), op);
    EXPECT_TRUE(all_close(g[0], c.at("grads")[0], t.rtol * 10, t.atol * 10)) << "gradient";
  }
}

INSTANTIATE_TEST_SUITE_P(Reduction, Golden, ::testing::ValuesIn(case_names()), [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dp
