// Every case of tests/golden/loss.json (written by PyTorch 1.13, tests/golden/gen_loss.py) run
// through dparallel's loss ops: the value (dtype and shape too) and, where the case has them, the
// gradients of sum(output * grad_output) w.r.t. input and target. Each case also runs on
// non-contiguous copies of its input and target, which must give the same results.
#include <gtest/gtest.h>
#include <cmath>
#include "dp/ops/loss.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_case;
using test::golden_file;
using test::json;
using test::tensor_from_json;

const char* kFile = "loss.json";

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const json& c : golden_file(kFile).at("cases")) names.push_back(c.at("name").get<std::string>());
  return names;
}

Reduction reduction_of(const std::string& r) {
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  return Reduction::Mean;
}

// The generator's formulas for cases too large to store (see gen_loss.py).
Tensor gen_input(const json& g) {
  const Shape shape = g.at("shape").get<Shape>();
  const double scale = g.at("scale").get<double>();
  const int64_t n = numel_of(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((static_cast<double>((i * 7919) % 10007) / 10007.0 - 0.3) * scale);
  return tensor<float>(v, shape);
}

Tensor gen_target(const json& g) {
  const Shape shape = g.at("shape").get<Shape>();
  const int64_t n = numel_of(shape), classes = g.at("classes").get<int64_t>();
  if (g.at("kind") == "index") {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = (i * 31) % classes;
    return tensor<int64_t>(v, shape);
  }
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<double>((i * 31) % 101) / 5050.0);
  return tensor<float>(v, shape);
}

Tensor run(const std::string& op, const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw, const json& a) {
  const Reduction r = reduction_of(a.at("reduction").get<std::string>());
  const int64_t ignore = a.at("ignore_index").get<int64_t>();
  const double ls = a.at("label_smoothing").get<double>();
  if (op == "mse_loss") return mse_loss(x, t, r);
  if (op == "l1_loss") return l1_loss(x, t, r);
  if (op == "binary_cross_entropy") return binary_cross_entropy(x, t, w, r);
  if (op == "binary_cross_entropy_with_logits") return binary_cross_entropy_with_logits(x, t, w, pw, r);
  if (op == "nll_loss") return nll_loss(x, t, w, ignore, r);
  if (op == "cross_entropy") return cross_entropy(x, t, w, ignore, r, ls);
  throw std::runtime_error("unknown op " + op);
}

// Same values and shape, different strides: the transposed layout (dims 0 and 1) seen back through
// a transpose. Tensors of fewer than 2 dims (or with a size-1 dim among the first two) are
// returned unchanged.
Tensor non_contiguous(const Tensor& t) {
  if (t.dim() < 2 || t.size(0) < 2 || t.size(1) < 2) return t;
  Tensor r = t.transpose(0, 1).contiguous().transpose(0, 1);
  EXPECT_FALSE(r.is_contiguous());
  return r;
}

// Every stride-th element of a flattened gradient (the generator stores samples of big ones).
Tensor sampled(const Tensor& g, int64_t stride) {
  if (stride == 1) return g;
  return g.reshape({-1}).slice(0, 0, std::nullopt, stride).contiguous();
}

class LossGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LossGolden, MatchesPyTorch) {
  const json& c = golden_case(kFile, GetParam());
  const std::string op = c.at("op").get<std::string>();
  const json& args = c.at("args");
  Tensor x0, t0;
  if (c.contains("gen")) {
    x0 = gen_input(c.at("gen").at("input"));
    t0 = gen_target(c.at("gen").at("target"));
  } else {
    x0 = tensor_from_json(c.at("input"));
    t0 = tensor_from_json(c.at("target"));
  }
  const Tensor w = c.contains("weight") ? tensor_from_json(c.at("weight")) : Tensor();
  const Tensor pw = c.contains("pos_weight") ? tensor_from_json(c.at("pos_weight")) : Tensor();
  const bool f64 = x0.dtype() == kFloat64;
  const double rtol = f64 ? 1e-10 : 2e-5, atol = f64 ? 1e-12 : 2e-6;
  const bool with_grad = c.contains("grads");
  const bool target_grad = with_grad && c.at("grads").contains("target");
  const int64_t stride = c.value("grads_stride", int64_t(1));

  for (bool contiguous : {true, false}) {
    SCOPED_TRACE(contiguous ? "contiguous" : "non-contiguous");
    Tensor x = contiguous ? x0.clone() : non_contiguous(x0);
    Tensor t = contiguous ? t0.clone() : non_contiguous(t0);
    if (with_grad) x.requires_grad_(true);
    if (target_grad) t.requires_grad_(true);
    Tensor out = run(op, x, t, w, pw, args);
    const json& expected = c.at("output");
    EXPECT_EQ(out.dtype(), x0.dtype());
    EXPECT_TRUE(all_close(out, expected, rtol, atol)) << "output";
    if (!with_grad) continue;
    ASSERT_TRUE(out.requires_grad());
    Tensor go = tensor_from_json(c.at("grad_output"));
    std::vector<Tensor> wrt{x};
    if (target_grad) wrt.push_back(t);
    std::vector<Tensor> g = autograd::grad({out}, wrt, {go});
    ASSERT_TRUE(g[0].defined());
    EXPECT_EQ(g[0].sizes(), x.sizes());
    EXPECT_TRUE(all_close(sampled(g[0], stride), c.at("grads").at("input"), rtol * 5, atol * 5)) << "gradient w.r.t. input";
    if (target_grad) {
      ASSERT_TRUE(g[1].defined());
      EXPECT_TRUE(all_close(sampled(g[1], stride), c.at("grads").at("target"), rtol * 5, atol * 5)) << "gradient w.r.t. target";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Loss, LossGolden, ::testing::ValuesIn(case_names()), [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dp
