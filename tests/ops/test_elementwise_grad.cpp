// Gradients of the element-wise ops and activations: finite-difference gradcheck of every
// differentiable op (with broadcasting operands), double backward (gradgradcheck) of every one whose
// second derivative is not trivially zero, grad_fn names, the dtype of gradients of mixed-dtype
// inputs, and what is not differentiable (comparisons, where's condition).
#include <gtest/gtest.h>
#include <functional>
#include <string>
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::gradcheck;
using test::rand_leaf;
using test::TensorFn;

using test::gradgradcheck;

struct GradCase {
  const char* name;
  TensorFn f;
  std::vector<Shape> shapes;  // one leaf per shape
  double lo, hi;              // input range
  bool grad_grad;             // also check double backward
};

const std::vector<GradCase>& cases() {
  using V = const std::vector<Tensor>&;
  static const std::vector<GradCase> c = {
      {"add", [](V x) { return add(x[0], x[1]); }, {{3, 4}, {4}}, -1, 1, true},
      {"add_alpha", [](V x) { return add(x[0], x[1], -2.5); }, {{3, 1}, {1, 4}}, -1, 1, true},
      {"add_scalar", [](V x) { return add(x[0], 3.0, 2); }, {{2, 3}}, -1, 1, true},
      {"sub", [](V x) { return sub(x[0], x[1], 0.5); }, {{3, 4}, {3, 1}}, -1, 1, true},
      {"sub_scalar", [](V x) { return sub(x[0], 1.5); }, {{2, 3}}, -1, 1, true},
      {"rsub", [](V x) { return rsub(x[0], 1.5); }, {{2, 3}}, -1, 1, true},
      {"mul", [](V x) { return mul(x[0], x[1]); }, {{3, 4}, {4}}, -1, 1, true},
      {"mul_self", [](V x) { return mul(x[0], x[0]); }, {{5}}, -1, 1, true},
      {"mul_scalar", [](V x) { return mul(x[0], -1.5); }, {{2, 3}}, -1, 1, true},
      {"div", [](V x) { return div(x[0], x[1]); }, {{3, 4}, {3, 1}}, 0.5, 2, true},
      {"div_scalar", [](V x) { return div(x[0], 4.0); }, {{2, 3}}, -1, 1, true},
      {"rdiv_scalar", [](V x) { return div(3.0, x[0]); }, {{2, 3}}, 0.5, 2, true},
      {"neg", [](V x) { return neg(x[0]); }, {{2, 3}}, -1, 1, true},
      {"pow", [](V x) { return pow(x[0], x[1]); }, {{3, 4}, {4}}, 0.5, 2, true},
      {"pow_scalar_2", [](V x) { return pow(x[0], 2); }, {{2, 3}}, -1, 1, true},
      {"pow_scalar_2p5", [](V x) { return pow(x[0], 2.5); }, {{2, 3}}, 0.5, 2, true},
      {"pow_scalar_m1", [](V x) { return pow(x[0], -1); }, {{2, 3}}, 0.5, 2, true},
      {"pow_scalar_0", [](V x) { return pow(x[0], 0); }, {{2, 3}}, 0.5, 2, false},
      {"rpow_scalar", [](V x) { return pow(1.7, x[0]); }, {{2, 3}}, -1, 1, true},
      {"exp", [](V x) { return exp(x[0]); }, {{2, 3}}, -1, 1, true},
      {"log", [](V x) { return log(x[0]); }, {{2, 3}}, 0.5, 2, true},
      {"log1p", [](V x) { return log1p(x[0]); }, {{2, 3}}, -0.5, 2, true},
      {"sqrt", [](V x) { return sqrt(x[0]); }, {{2, 3}}, 0.5, 2, true},
      {"rsqrt", [](V x) { return rsqrt(x[0]); }, {{2, 3}}, 0.5, 2, true},
      {"abs", [](V x) { return abs(x[0]); }, {{2, 3}}, -1, 1, true},
      {"sign", [](V x) { return mul(sign(x[0]), x[0]); }, {{2, 3}}, -1, 1, true},
      {"sin", [](V x) { return sin(x[0]); }, {{2, 3}}, -2, 2, true},
      {"cos", [](V x) { return cos(x[0]); }, {{2, 3}}, -2, 2, true},
      {"square", [](V x) { return square(x[0]); }, {{2, 3}}, -1, 1, true},
      {"reciprocal", [](V x) { return reciprocal(x[0]); }, {{2, 3}}, 0.5, 2, true},
      {"clamp", [](V x) { return clamp(x[0], -0.5, 0.5); }, {{3, 4}}, -1, 1, true},
      {"clamp_min", [](V x) { return clamp_min(x[0], 0.1); }, {{3, 4}}, -1, 1, true},
      {"clamp_max", [](V x) { return clamp_max(x[0], 0.1); }, {{3, 4}}, -1, 1, true},
      {"maximum", [](V x) { return maximum(x[0], x[1]); }, {{3, 4}, {4}}, -1, 1, true},
      {"minimum", [](V x) { return minimum(x[0], x[1]); }, {{3, 1}, {4}}, -1, 1, true},
      {"where", [](V x) { return where(gt(x[0], 0.0), x[0], x[1]); }, {{3, 4}, {4}}, -1, 1, true},
      {"where_scalar", [](V x) { return where(gt(x[0], 0.0), mul(x[0], x[0]), 0.5); }, {{3, 4}}, -1, 1, true},
      {"lerp", [](V x) { return lerp(x[0], x[1], 0.3); }, {{3, 4}, {4}}, -1, 1, true},
      {"lerp_far", [](V x) { return lerp(x[0], x[1], 0.8); }, {{3, 1}, {3, 4}}, -1, 1, true},
      {"relu", [](V x) { return relu(x[0]); }, {{3, 4}}, -1, 1, true},
      {"sigmoid", [](V x) { return sigmoid(x[0]); }, {{3, 4}}, -3, 3, true},
      {"tanh", [](V x) { return tanh(x[0]); }, {{3, 4}}, -2, 2, true},
      {"gelu", [](V x) { return gelu(x[0]); }, {{3, 4}}, -3, 3, true},
      {"gelu_tanh", [](V x) { return gelu(x[0], "tanh"); }, {{3, 4}}, -3, 3, true},
      {"silu", [](V x) { return silu(x[0]); }, {{3, 4}}, -3, 3, true},
      {"softplus", [](V x) { return softplus(x[0]); }, {{3, 4}}, -3, 3, true},
      {"softplus_linear_region", [](V x) { return softplus(x[0]); }, {{6}}, 20.5, 30, true},
      {"composite", [](V x) { return div(mul(exp(x[0]), sigmoid(x[1])), add(square(x[0]), 1.0)); }, {{2, 3}, {3}}, -1, 1, true},
  };
  return c;
}

std::vector<std::string> case_names() {
  std::vector<std::string> v;
  for (const GradCase& c : cases()) v.push_back(c.name);
  return v;
}

const GradCase& find_case(const std::string& name) {
  for (const GradCase& c : cases())
    if (name == c.name) return c;
  throw std::runtime_error("no case " + name);
}

class Grad : public ::testing::TestWithParam<std::string> {};

TEST_P(Grad, Gradcheck) {
  const GradCase& c = find_case(GetParam());
  manual_seed(21);
  std::vector<Tensor> in;
  for (const Shape& s : c.shapes) in.push_back(rand_leaf(s, c.lo, c.hi));
  EXPECT_TRUE(gradcheck(c.f, in));
}

TEST_P(Grad, DoubleBackward) {
  const GradCase& c = find_case(GetParam());
  manual_seed(22);
  std::vector<Tensor> in;
  for (const Shape& s : c.shapes) in.push_back(rand_leaf(s, c.lo, c.hi));
  if (c.grad_grad) {
    EXPECT_TRUE(gradgradcheck(c.f, in));
  } else {
    // A constant first derivative (x^0): the gradient is a constant zero without history.
    Tensor g = autograd::grad({c.f(in)}, {in[0]}, {ones_like(in[0])}, true, /*create_graph=*/true)[0];
    EXPECT_FALSE(g.requires_grad());
    EXPECT_TRUE(equal(g, zeros_like(in[0])));
  }
}

INSTANTIATE_TEST_SUITE_P(Elementwise, Grad, ::testing::ValuesIn(case_names()), [](const auto& info) { return info.param; });

TEST(ElementwiseGrad, NodeNames) {
  Tensor x = tensor<float>({0.5f, 1.f}).requires_grad_(), y = tensor<float>({2.f, 3.f}).requires_grad_();
  const std::vector<std::pair<std::string, Tensor>> expect = {
      {"AddBackward0", x + y},
      {"AddBackward1", x + 1.0},
      {"SubBackward0", x - y},
      {"SubBackward1", x - 1.0},
      {"RsubBackward1", 1.0 - x},
      {"MulBackward0", x * y},
      {"MulBackward1", x * 2.0},
      {"DivBackward0", x / y},
      {"DivBackward1", x / 2.0},
      {"NegBackward0", -x},
      {"PowBackward0", x.pow(2)},
      {"PowBackward1", x.pow(y)},
      {"PowBackward2", pow(2.0, x)},
      {"ExpBackward0", x.exp()},
      {"LogBackward0", x.log()},
      {"Log1PBackward0", log1p(x)},
      {"SqrtBackward0", x.sqrt()},
      {"RsqrtBackward0", rsqrt(x)},
      {"AbsBackward0", x.abs()},
      {"SignBackward0", sign(x)},
      {"SinBackward0", x.sin()},
      {"CosBackward0", x.cos()},
      {"PowBackward0", square(x)},
      {"ReciprocalBackward0", reciprocal(x)},
      {"ClampBackward1", x.clamp(0.0, 1.0)},
      {"ClampMinBackward0", clamp_min(x, 0.0)},
      {"ClampMaxBackward0", clamp_max(x, 0.0)},
      {"MaximumBackward0", maximum(x, y)},
      {"MinimumBackward0", minimum(x, y)},
      {"WhereBackward0", where(gt(x, y), x, y)},
      {"LerpBackward0", lerp(x, y, 0.5)},
      {"ReluBackward0", relu(x)},
      {"SigmoidBackward0", sigmoid(x)},
      {"TanhBackward0", tanh(x)},
      {"GeluBackward0", gelu(x)},
      {"SiluBackward0", silu(x)},
      {"SoftplusBackward0", softplus(x)},
  };
  for (const auto& [name, t] : expect) {
    ASSERT_TRUE(t.grad_fn()) << name;
    EXPECT_EQ(t.grad_fn()->name(), name);
  }
}

TEST(ElementwiseGrad, NotDifferentiable) {
  Tensor x = tensor<float>({0.5f, -1.f}).requires_grad_();
  for (const Tensor& t : {gt(x, 0.0), eq(x, x), ne(x, 1.0), lt(x, x), le(x, 0.0), ge(x, x), logical_not(x)}) {
    EXPECT_EQ(t.dtype(), kBool);
    EXPECT_FALSE(t.requires_grad());
  }
  // No history without grad mode, or when no input requires grad.
  {
    NoGradGuard no_grad;
    EXPECT_FALSE((x * 2.0).requires_grad());
    EXPECT_FALSE(exp(x).requires_grad());
  }
  EXPECT_FALSE(add(ones({2}), ones({2})).requires_grad());
  // where's condition carries no gradient; the branches do.
  Tensor a = ones({2}).requires_grad_(), b = zeros({2}).requires_grad_();
  where(tensor<bool>({true, false}), a, b).sum().backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{1.f, 0.f}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{0.f, 1.f}));
}

TEST(ElementwiseGrad, KinksFollowPyTorch) {
  Tensor x = tensor<double>({-1.0, 0.0, 2.0}).requires_grad_();
  relu(x).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0.0, 0.0, 1.0}));  // relu'(0) = 0
  Tensor y = tensor<double>({-1.0, 0.0, 2.0}).requires_grad_();
  abs(y).sum().backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{-1.0, 0.0, 1.0}));
  Tensor c = tensor<double>({-1.0, -0.5, 0.0, 0.5, 1.0}).requires_grad_();
  clamp(c, -0.5, 0.5).sum().backward();  // the bounds themselves pass the gradient
  EXPECT_EQ(c.grad().to_vector<double>(), (std::vector<double>{0.0, 1.0, 1.0, 1.0, 0.0}));
  Tensor m = tensor<double>({1.0, 2.0}).requires_grad_(), n = tensor<double>({1.0, 3.0}).requires_grad_();
  maximum(m, n).sum().backward();  // a tie splits the gradient
  EXPECT_EQ(m.grad().to_vector<double>(), (std::vector<double>{0.5, 0.0}));
  EXPECT_EQ(n.grad().to_vector<double>(), (std::vector<double>{0.5, 1.0}));
  Tensor p = tensor<double>({0.0, 2.0}).requires_grad_(), e = tensor<double>({2.0, 0.0}).requires_grad_();
  pow(p, e).sum().backward();  // d/de at base 0 is 0; d/dx at exponent 0 is 0
  EXPECT_EQ(p.grad().to_vector<double>(), (std::vector<double>{0.0, 0.0}));
  EXPECT_NEAR(e.grad().to_vector<double>()[1], std::log(2.0), 1e-15);
  EXPECT_EQ(e.grad().to_vector<double>()[0], 0.0);
  Tensor s = tensor<double>({-2.0, 3.0}).requires_grad_();
  sign(s).sum().backward();
  EXPECT_EQ(s.grad().to_vector<double>(), (std::vector<double>{0.0, 0.0}));
}

TEST(ElementwiseGrad, GradientDtypeIsTheInputDtype) {
  Tensor h = tensor<float>({1.f, 2.f}).to(kFloat16).requires_grad_();
  Tensor f = tensor<float>({3.f, 4.f}).requires_grad_();
  Tensor d = scalar_tensor(2.0, kFloat64).requires_grad_();
  Tensor out = mul(add(h, f), d);  // float32 (0-dim float64 does not widen)
  EXPECT_EQ(out.dtype(), kFloat32);
  out.sum().backward();
  EXPECT_EQ(h.grad().dtype(), kFloat16);
  EXPECT_EQ(f.grad().dtype(), kFloat32);
  EXPECT_EQ(d.grad().dtype(), kFloat64);
  EXPECT_EQ(d.grad().dim(), 0);
  EXPECT_EQ(h.grad().to_vector<float>(), (std::vector<float>{2.f, 2.f}));
  EXPECT_DOUBLE_EQ(d.grad().item<double>(), 10.0);
  // float16 through a floating op, computed in float and rounded.
  Tensor g = tensor<float>({0.f, 1.f}).to(kFloat16).requires_grad_();
  sigmoid(g).sum().backward();
  EXPECT_EQ(g.grad().dtype(), kFloat16);
  EXPECT_NEAR(g.grad().to_vector<float>()[0], 0.25f, 1e-3);
  EXPECT_NEAR(g.grad().to_vector<float>()[1], 0.19661193f, 1e-3);
}

TEST(ElementwiseGrad, BroadcastGradientsSumBack) {
  Tensor a = ones({3, 1}).requires_grad_(), b = ones({4}).requires_grad_();
  Tensor s = scalar_tensor(2.0).requires_grad_();
  mul(add(a, b), s).sum().backward();
  EXPECT_EQ(a.grad().sizes(), (Shape{3, 1}));
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>(3, 8.f));
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(4, 6.f));
  EXPECT_EQ(s.grad().item<float>(), 24.f);
}

TEST(ElementwiseGrad, FusedAndCompositeBackwardAgree) {
  // A plain backward uses one fused kernel per activation; under create_graph the dp-op formula.
  manual_seed(23);
  Tensor x0 = rand({64}, kFloat32) * 8.0 - 4.0;
  for (auto f : std::vector<std::function<Tensor(const Tensor&)>>{
           [](const Tensor& t) { return relu(t); }, [](const Tensor& t) { return sigmoid(t); }, [](const Tensor& t) { return tanh(t); },
           [](const Tensor& t) { return gelu(t); }, [](const Tensor& t) { return gelu(t, "tanh"); }, [](const Tensor& t) { return silu(t); },
           [](const Tensor& t) { return softplus(add(t, 18.0)); }}) {
    Tensor a = x0.detach().requires_grad_(), b = x0.detach().requires_grad_();
    Tensor g = rand({64});
    Tensor ga = autograd::grad({f(a)}, {a}, {g})[0];
    Tensor gb = autograd::grad({f(b)}, {b}, {g}, true, /*create_graph=*/true)[0];
    EXPECT_TRUE(test::all_close(ga, gb.detach(), 1e-5, 1e-6));
  }
}

}  // namespace
}  // namespace dp
