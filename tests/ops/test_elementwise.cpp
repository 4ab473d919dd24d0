// Element-wise ops beyond the golden table: PyTorch's type promotion rules case by case, the
// kernels' fast paths (contiguous, tensor-scalar, row / column broadcast, strided) on tensors large
// enough to use them checked against a scalar reference, devices, equal/allclose, and the errors
// (shapes, devices, dtypes, bad arguments) with their messages.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <string>
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;

class Elementwise : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cpu_device_count() < 2) set_cpu_device_count(2);
  }
};

// ---------------------------------------------------------------- type promotion

TEST_F(Elementwise, ResultTypeFollowsPyTorch) {
  Tensor i32 = zeros({2}, kInt32), i64 = zeros({2}, kInt64), u8 = zeros({2}, kUInt8), b = zeros({2}, kBool);
  Tensor f16 = zeros({2}, kFloat16), bf16 = zeros({2}, kBFloat16), f32 = zeros({2}), f64 = zeros({2}, kFloat64);
  Tensor f32_0d = scalar_tensor(1.0, kFloat32), f64_0d = scalar_tensor(1.0, kFloat64), i64_0d = scalar_tensor(5, kInt64);
  EXPECT_EQ(result_type(i32, i64), kInt64);
  EXPECT_EQ(result_type(u8, i32), kInt32);
  EXPECT_EQ(result_type(b, u8), kUInt8);
  EXPECT_EQ(result_type(i64, f16), kFloat16);
  EXPECT_EQ(result_type(f16, bf16), kFloat32);
  EXPECT_EQ(result_type(f32, f64), kFloat64);
  // Dimensioned tensors outrank 0-dim tensors of the same category.
  EXPECT_EQ(result_type(f16, f32_0d), kFloat16);
  EXPECT_EQ(result_type(f32_0d, f16), kFloat16);
  EXPECT_EQ(result_type(u8, i64_0d), kUInt8);
  // A higher category in a 0-dim tensor lifts the result to that category: PyTorch 1.13 keeps the
  // 0-dim tensor's own dtype there (torch.result_type(int tensor, float64 0-dim) == float64).
  EXPECT_EQ(result_type(i32, f64_0d), kFloat64);
  EXPECT_EQ(result_type(b, i64_0d), kInt64);
  // Two 0-dim tensors promote normally.
  EXPECT_EQ(result_type(scalar_tensor(1, kUInt8), f64_0d), kFloat64);
  // Scalars: never widen within a category; a float Scalar lifts integers to the default dtype.
  EXPECT_EQ(result_type(i32, Scalar(0.5)), kFloat32);
  EXPECT_EQ(result_type(i64, Scalar(1e10)), kFloat32);
  EXPECT_EQ(result_type(i32, Scalar(2)), kInt32);
  EXPECT_EQ(result_type(u8, Scalar(1000)), kUInt8);
  EXPECT_EQ(result_type(b, Scalar(2)), kInt64);
  EXPECT_EQ(result_type(b, Scalar(2.5)), kFloat32);
  EXPECT_EQ(result_type(b, Scalar(true)), kBool);
  EXPECT_EQ(result_type(f16, Scalar(2.5)), kFloat16);
  EXPECT_EQ(result_type(f64_0d, Scalar(2)), kFloat64);
  EXPECT_EQ(result_type(i64_0d, Scalar(2.5)), kFloat32);
}

TEST_F(Elementwise, OpsComputeInThePromotedDtype) {
  Tensor i = tensor<int64_t>({1, 2, 3});
  Tensor r = add(i, 0.5);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(add(i, tensor<int32_t>({1, 1, 1})).dtype(), kInt64);
  EXPECT_EQ(mul(i, scalar_tensor(2.0, kFloat64)).dtype(), kFloat64);
  Tensor h = tensor<float>({1.f, 2.f}).to(kFloat16);
  EXPECT_EQ(add(h, scalar_tensor(1.0, kFloat32)).dtype(), kFloat16);
  EXPECT_EQ(add(h, tensor<float>({1.f, 1.f})).dtype(), kFloat32);
  // True division: integers give float32.
  Tensor q = div(tensor<int64_t>({7, -7}), tensor<int64_t>({2, 2}));
  EXPECT_EQ(q.dtype(), kFloat32);
  EXPECT_EQ(q.to_vector<float>(), (std::vector<float>{3.5f, -3.5f}));
  EXPECT_EQ(div(tensor<int32_t>({1}), 4).to_vector<float>(), std::vector<float>{0.25f});
  // Floating ops on integers give float32; integer-preserving ones keep the dtype.
  EXPECT_EQ(exp(tensor<int32_t>({0})).dtype(), kFloat32);
  EXPECT_EQ(sqrt(tensor<uint8_t>({4})).to_vector<float>(), std::vector<float>{2.f});
  EXPECT_EQ(sigmoid(tensor<int64_t>({0})).to_vector<float>(), std::vector<float>{0.5f});
  EXPECT_EQ(abs(tensor<int32_t>({-3})).dtype(), kInt32);
  EXPECT_EQ(relu(tensor<int64_t>({-3, 4})).to_vector<int64_t>(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(clamp(tensor<int64_t>({1, 5}), 2, std::nullopt).dtype(), kInt64);
  EXPECT_EQ(clamp(tensor<int64_t>({1, 5}), 1.5, std::nullopt).to_vector<float>(), (std::vector<float>{1.5f, 5.f}));
  // Comparisons compute in the promoted dtype and give bool.
  Tensor c = eq(tensor<int64_t>({0, 1}), 0.5);
  EXPECT_EQ(c.dtype(), kBool);
  EXPECT_EQ(c.to_vector<bool>(), (std::vector<bool>{false, false}));
  EXPECT_EQ(lt(tensor<int32_t>({1, 2}), tensor<float>({1.5f, 1.5f})).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(eq(tensor<float>({0.1f}).to(kFloat16), 0.1).to_vector<bool>(), std::vector<bool>{true});
}

// ---------------------------------------------------------------- kernel paths on larger tensors

// Reference: element (i, j) of a [rows, cols] result computed one by one.
template <typename F>
std::vector<float> reference(int64_t rows, int64_t cols, F f) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v.push_back(f(i, j));
  return v;
}

TEST_F(Elementwise, FastPathsMatchAScalarReference) {
  manual_seed(3);
  const int64_t R = 67, C = 131;  // odd sizes: vector remainders in every row
  Tensor a = randn({R, C}), b = randn({R, C}), row = randn({C}), col = randn({R, 1}), s0 = randn({});
  auto A = a.to_vector<float>(), B = b.to_vector<float>(), Row = row.to_vector<float>(), Col = col.to_vector<float>();
  const float S = s0.item<float>();
  auto at = [&](const std::vector<float>& v, int64_t i, int64_t j) { return v[i * C + j]; };
  // contiguous, same shape
  EXPECT_TRUE(all_close(add(a, b), tensor<float>(reference(R, C, [&](auto i, auto j) { return at(A, i, j) + at(B, i, j); }), {R, C}), 0, 0));
  EXPECT_TRUE(all_close(add(a, b, 2.5), tensor<float>(reference(R, C, [&](auto i, auto j) { return at(A, i, j) + 2.5f * at(B, i, j); }), {R, C}),
                        1e-6, 1e-6));
  // tensor op scalar
  EXPECT_TRUE(all_close(mul(a, 3.0), tensor<float>(reference(R, C, [&](auto i, auto j) { return at(A, i, j) * 3.f; }), {R, C}), 0, 0));
  EXPECT_TRUE(all_close(div(2.0, a), tensor<float>(reference(R, C, [&](auto i, auto j) { return 2.f / at(A, i, j); }), {R, C}), 0, 0));
  // row broadcast, column broadcast, 0-dim broadcast (both orders)
  EXPECT_TRUE(all_close(sub(a, row), tensor<float>(reference(R, C, [&](auto i, auto j) { return at(A, i, j) - Row[j]; }), {R, C}), 0, 0));
  EXPECT_TRUE(all_close(sub(row, a), tensor<float>(reference(R, C, [&](auto i, auto j) { return Row[j] - at(A, i, j); }), {R, C}), 0, 0));
  EXPECT_TRUE(all_close(mul(a, col), tensor<float>(reference(R, C, [&](auto i, auto j) { return at(A, i, j) * Col[i]; }), {R, C}), 0, 0));
  EXPECT_TRUE(all_close(mul(col, a), tensor<float>(reference(R, C, [&](auto i, auto j) { return Col[i] * at(A, i, j); }), {R, C}), 0, 0));
  EXPECT_TRUE(all_close(div(a, s0), tensor<float>(reference(R, C, [&](auto i, auto j) { return at(A, i, j) / S; }), {R, C}), 0, 0));
  EXPECT_TRUE(all_close(add(col, row), tensor<float>(reference(R, C, [&](auto i, auto j) { return Col[i] + Row[j]; }), {R, C}), 0, 0));
  // transposed and strided operands
  Tensor at_ = a.t(), bt = b.t();
  EXPECT_TRUE(
      all_close(maximum(at_, bt), tensor<float>(reference(C, R, [&](auto j, auto i) { return std::max(at(A, i, j), at(B, i, j)); }), {C, R}), 0, 0));
  EXPECT_TRUE(all_close(add(at_, bt), add(a, b).t(), 0, 0));
  EXPECT_TRUE(all_close(add(at_, b.t().contiguous()), add(a, b).t(), 0, 0));
  Tensor stepped = a.slice(1, std::nullopt, std::nullopt, 3);  // [R, 44] with stride 3
  const int64_t C3 = stepped.size(1);
  EXPECT_TRUE(all_close(exp(stepped), tensor<float>(reference(R, C3, [&](auto i, auto j) { return std::exp(at(A, i, 3 * j)); }), {R, C3}), 1e-6, 0));
  // 3 inputs with broadcasting (where)
  Tensor cond = gt(col, 0.0);
  auto Cond = cond.to_vector<bool>();
  EXPECT_TRUE(
      all_close(where(cond, a, row), tensor<float>(reference(R, C, [&](auto i, auto j) { return Cond[i] ? at(A, i, j) : Row[j]; }), {R, C}), 0, 0));
  // expanded operand into a non-contiguous output (in place into a transposed view)
  Tensor o = zeros({C, R}).t();
  o.copy_(a);
  o.add_(row.expand({R, C}));
  EXPECT_TRUE(all_close(o, add(a, row), 0, 0));
}

TEST_F(Elementwise, EveryNumericDtypeOnLargeTensors) {
  manual_seed(4);
  Tensor base = randint(-50, 50, {33, 65});
  for (DType dt : {kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = (dt == kUInt8 ? abs(base) : base).to(dt);
    Tensor y = add(x, x.t().contiguous().t());  // same values, strided second operand
    EXPECT_TRUE(all_close(y, mul(x, 2), 0, 0));
    EXPECT_TRUE(all_close(sub(y, x), x, 0, 0));
    EXPECT_TRUE(equal(maximum(x, y.slice(0, 0, 1)), maximum(x, y.slice(0, 0, 1).expand({33, 65}).contiguous())));
  }
}

TEST_F(Elementwise, ZeroDimAndEmpty) {
  Tensor a = scalar_tensor(2.0), b = scalar_tensor(3.0);
  Tensor c = mul(a, b);
  EXPECT_EQ(c.dim(), 0);
  EXPECT_EQ(c.item<float>(), 6.f);
  EXPECT_EQ(add(zeros({0, 4}), ones({4})).sizes(), (Shape{0, 4}));
  EXPECT_EQ(exp(zeros({3, 0})).sizes(), (Shape{3, 0}));
  EXPECT_EQ(where(ones({0}, kBool), zeros({0}), 1.0).numel(), 0);
  Tensor e = zeros({0});
  e.add_(1.0);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(equal(zeros({0}), zeros({0})));
  EXPECT_TRUE(allclose(zeros({0}), zeros({0})));
}

TEST_F(Elementwise, ResultsStayOnTheOperandsDevice) {
  Tensor a = ones({2, 3}, Device("cpu:1")), b = full({3}, 2.0, Device("cpu:1"));
  Tensor c = add(a, b);
  EXPECT_EQ(c.device(), Device("cpu:1"));
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(6, 3.f));
  EXPECT_EQ(exp(a).device(), Device("cpu:1"));
  EXPECT_EQ(gt(a, 0.5).device(), Device("cpu:1"));
}

TEST_F(Elementwise, EqualAndAllclose) {
  Tensor a = tensor<float>({1.f, 2.f, 3.f});
  EXPECT_TRUE(equal(a, a.clone()));
  EXPECT_FALSE(equal(a, tensor<float>({1.f, 2.f, 3.5f})));
  EXPECT_FALSE(equal(a, a.view({1, 3})));                                  // shapes differ
  EXPECT_TRUE(equal(tensor<int64_t>({1, 2}), tensor<float>({1.f, 2.f})));  // values compared after promotion
  EXPECT_FALSE(equal(tensor<float>({NAN}), tensor<float>({NAN})));
  EXPECT_TRUE(allclose(a, add(a, 1e-7)));
  EXPECT_FALSE(allclose(a, add(a, 1e-3)));
  EXPECT_TRUE(allclose(a, add(a, 1e-3), 1e-3, 0));
  EXPECT_TRUE(allclose(tensor<float>({INFINITY, -INFINITY}), tensor<float>({INFINITY, -INFINITY})));
  EXPECT_FALSE(allclose(tensor<float>({INFINITY}), tensor<float>({-INFINITY})));
  EXPECT_FALSE(allclose(tensor<float>({NAN}), tensor<float>({NAN})));
  EXPECT_TRUE(allclose(tensor<float>({1.f, 1.f}), tensor<float>({1.f})));  // broadcasts, as torch.allclose
  EXPECT_THROW(allclose(a, a.to(kFloat64)), DTypeError);
}

TEST_F(Elementwise, ActivationsAtTheirEdges) {
  // softplus switches to the identity above 20; relu keeps NaN; gelu forms differ slightly.
  Tensor x = tensor<double>({19.0, 20.0, 21.0, -50.0});
  auto sp = softplus(x).to_vector<double>();
  EXPECT_DOUBLE_EQ(sp[0], std::log1p(std::exp(19.0)));
  EXPECT_DOUBLE_EQ(sp[1], std::log1p(std::exp(20.0)));
  EXPECT_DOUBLE_EQ(sp[2], 21.0);
  EXPECT_GT(sp[3], 0.0);
  EXPECT_TRUE(std::isnan(relu(tensor<float>({NAN})).item<float>()));
  EXPECT_EQ(relu(tensor<float>({-0.0f, 0.0f, 2.f})).to_vector<float>(), (std::vector<float>{0.f, 0.f, 2.f}));
  Tensor g = gelu(tensor<double>({1.0}));
  Tensor gt_ = gelu(tensor<double>({1.0}), "tanh");
  EXPECT_NEAR(g.item<double>(), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(gt_.item<double>(), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(silu(tensor<double>({1.0})).item<double>(), 1.0 / (1.0 + std::exp(-1.0)), 1e-15);
}

// float32 exp/log/log1p/tanh and what uses them run vectorisable polynomial versions: sweep them
// against double-precision libm over their whole range.
TEST_F(Elementwise, Float32MathAccuracy) {
  auto sweep = [](double lo, double hi, int n) {
    std::vector<float> v;
    for (int i = 0; i <= n; ++i) v.push_back(static_cast<float>(lo + (hi - lo) * i / n));
    return v;
  };
  auto check = [](const char* name, const std::vector<float>& xs, const std::function<Tensor(const Tensor&)>& op,
                  const std::function<double(double)>& ref, double rel, double abs_tol) {
    std::vector<float> got = op(tensor<float>(xs)).to_vector<float>();
    int bad = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = static_cast<float>(ref(xs[i]));  // the correctly rounded float result
      const double g = got[i];
      const bool ok = (std::isnan(want) && std::isnan(g)) || g == want || std::fabs(g - want) <= abs_tol + rel * std::fabs(want);
      if (!ok && bad++ < 5) ADD_FAILURE() << name << "(" << xs[i] << ") = " << g << ", want " << want;
    }
    EXPECT_EQ(bad, 0) << name;
  };
  const double eps = 3e-7;  // about 2.5 ulp
  std::vector<float> wide = sweep(-110, 95, 40000);
  for (float s : {0.f, -0.f, 1e-30f, -1e-30f, 88.72f, 88.73f, -87.4f, -103.9f, INFINITY, -INFINITY, NAN}) wide.push_back(s);
  check(
      "exp", wide, [](const Tensor& t) { return exp(t); }, [](double x) { return std::exp(x); }, eps, 3e-45);
  // 1 / (1 + exp(-x)) underflows to 0 where the exact result is subnormal (below FLT_MIN), as PyTorch's.
  check(
      "sigmoid", wide, [](const Tensor& t) { return sigmoid(t); }, [](double x) { return 1 / (1 + std::exp(-x)); }, eps, 1.2e-38);
  check(
      "silu", wide, [](const Tensor& t) { return silu(t); }, [](double x) { return x / (1 + std::exp(-x)); }, eps, 1e-36);
  check(
      "tanh", wide, [](const Tensor& t) { return tanh(t); }, [](double x) { return std::tanh(x); }, eps, 3e-45);
  check(
      "softplus", wide, [](const Tensor& t) { return softplus(t); }, [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, eps, 3e-45);
  std::vector<float> pos;
  for (int i = -149; i <= 127; ++i)
    for (float m : {1.f, 1.1f, 1.4142135f, 1.5f, 1.9999999f}) pos.push_back(std::ldexp(m, i));
  for (float s : {0.f, -1.f, INFINITY, NAN, 1.f, 0.99999994f, 1.0000001f}) pos.push_back(s);
  check(
      "log", pos, [](const Tensor& t) { return log(t); }, [](double x) { return std::log(x); }, eps, 0);
  std::vector<float> l1p = sweep(-0.999, 50, 20000);
  for (float s : {1e-30f, -1e-20f, 1e-8f, -1e-7f, 3e-4f, -1.f, -2.f, INFINITY, NAN, 1e30f}) l1p.push_back(s);
  check(
      "log1p", l1p, [](const Tensor& t) { return log1p(t); }, [](double x) { return std::log1p(x); }, eps, 0);
  // gelu's erf is PyTorch's vectorised approximation (absolute error of erf below 1.5e-7).
  std::vector<float> g = sweep(-12, 12, 20000);
  check(
      "gelu", g, [](const Tensor& t) { return gelu(t); }, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, eps, 4e-7);
  check(
      "gelu_tanh", g, [](const Tensor& t) { return gelu(t, "tanh"); },
      [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, eps, 1e-7);
}

// ---------------------------------------------------------------- errors

template <typename E, typename F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

TEST_F(Elementwise, ShapeMismatchNamesBothShapes) {
  std::string m = message_of<ShapeError>([] { add(zeros({2, 3}), zeros({4})); });
  EXPECT_NE(m.find("add"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  EXPECT_THROW(mul(zeros({2, 3}), zeros({3, 2})), ShapeError);
  EXPECT_THROW(where(ones({3}, kBool), zeros({2, 3}), zeros({2, 3}).slice(1, 0, 2)), ShapeError);
  EXPECT_THROW(where(ones({4}, kBool), zeros({2, 3}), 0.0), ShapeError);
  EXPECT_THROW(lt(zeros({5}), zeros({2})), ShapeError);
  EXPECT_THROW(lerp(zeros({2}), zeros({3}), 0.5), ShapeError);
}

TEST_F(Elementwise, DifferentDevicesAreRejected) {
  Tensor a = zeros({2}, Device("cpu:0")), b = zeros({2}, Device("cpu:1"));
  std::string m = message_of<DeviceError>([&] { add(a, b); });
  EXPECT_NE(m.find("cpu:0"), std::string::npos) << m;
  EXPECT_NE(m.find("cpu:1"), std::string::npos) << m;
  EXPECT_THROW(mul(a, b), DeviceError);
  EXPECT_THROW(eq(a, b), DeviceError);
  EXPECT_THROW(pow(a, b), DeviceError);
  EXPECT_THROW(where(ones({2}, TensorOptions(kBool).device(Device("cpu:1"))), a, a), DeviceError);
  EXPECT_THROW(where(ones({2}, kBool), a, b), DeviceError);
  EXPECT_THROW(a.add_(b), DeviceError);
  EXPECT_THROW(a.addcmul_(a, b), DeviceError);
  EXPECT_THROW(equal(a, b), DeviceError);
  EXPECT_THROW(zeros({2}).add_(a), DeviceError);  // host "cpu" and cpu:0 are different devices too
}

TEST_F(Elementwise, DtypeErrors) {
  Tensor b = ones({2}, kBool), i = ones({2}, kInt64), f = ones({2});
  EXPECT_NE(message_of<DTypeError>([&] { sub(b, b); }).find("with two bool tensors is not supported"), std::string::npos);
  EXPECT_THROW(sub(b, i), DTypeError);
  EXPECT_THROW(rsub(b, 1), DTypeError);
  EXPECT_NE(message_of<DTypeError>([&] { neg(b); }).find("on a bool tensor is not supported"), std::string::npos);
  EXPECT_THROW(abs(b), DTypeError);
  EXPECT_THROW(relu(b), DTypeError);
  EXPECT_THROW(gelu(i), DTypeError);
  EXPECT_THROW(silu(i), DTypeError);
  EXPECT_THROW(softplus(i), DTypeError);
  EXPECT_THROW(pow(b, b), DTypeError);
  EXPECT_NE(message_of<DTypeError>([&] { add(i, i, 0.5); }).find("alpha must not be a floating point number"), std::string::npos);
  EXPECT_NE(message_of<DTypeError>([&] { add(f, f, true); }).find("Boolean alpha only supported for Boolean results"), std::string::npos);
  EXPECT_THROW(where(i, f, f), DTypeError);
  EXPECT_NE(message_of<DTypeError>([&] { lerp(f, f.to(kFloat64), 0.5); }).find("expected dtype float32 for `end`"), std::string::npos);
  EXPECT_THROW(lerp(i, i, 0.5), DTypeError);
  EXPECT_THROW(clamp(b, true, std::nullopt), DTypeError);
}

TEST_F(Elementwise, BadArguments) {
  Tensor f = ones({2}), i = ones({2}, kInt64);
  EXPECT_NE(message_of<ValueError>([&] { clamp(f, std::nullopt, std::nullopt); }).find("At least one of 'min' or 'max'"), std::string::npos);
  EXPECT_THROW(clamp_(f, std::nullopt, std::nullopt), ValueError);
  EXPECT_NE(message_of<ValueError>([&] { pow(i, -1); }).find("Integers to negative integer powers are not allowed"), std::string::npos);
  EXPECT_THROW(gelu(f, "exact"), ValueError);
  EXPECT_THROW(add(Tensor(), f), ValueError);
  EXPECT_THROW(allclose(f, f, -1.0), ValueError);
}

TEST_F(Elementwise, TensorMethodsAndOperatorsForward) {
  Tensor a = tensor<float>({1.f, -2.f, 3.f}), b = tensor<float>({2.f, 2.f, 2.f});
  EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{3.f, 0.f, 5.f}));
  EXPECT_EQ((a - b).to_vector<float>(), (std::vector<float>{-1.f, -4.f, 1.f}));
  EXPECT_EQ((a * b).to_vector<float>(), (std::vector<float>{2.f, -4.f, 6.f}));
  EXPECT_EQ((a / b).to_vector<float>(), (std::vector<float>{0.5f, -1.f, 1.5f}));
  EXPECT_EQ((1.0 - a).to_vector<float>(), (std::vector<float>{0.f, 3.f, -2.f}));
  EXPECT_EQ((6.0 / b).to_vector<float>(), (std::vector<float>{3.f, 3.f, 3.f}));
  EXPECT_EQ((-a).to_vector<float>(), (std::vector<float>{-1.f, 2.f, -3.f}));
  EXPECT_EQ(a.pow(2).to_vector<float>(), (std::vector<float>{1.f, 4.f, 9.f}));
  EXPECT_EQ(a.clamp(-1.0, 2.0).to_vector<float>(), (std::vector<float>{1.f, -1.f, 2.f}));
  EXPECT_EQ(a.ge(1.0).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  Tensor c = a.clone();
  c += b;
  c *= 2.0;
  c -= 1;
  c /= b;
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2.5f, -0.5f, 4.5f}));
}

}  // namespace
}  // namespace dp
