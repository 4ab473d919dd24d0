// Unary math: neg, abs, sign, square, exp, log, log1p, sqrt, rsqrt, sin, cos, reciprocal, clamp —
// the differentiable ops (the unary kernel, shared with the activations, and clamp's:
// backend/elementwise_kernels.h).
#include <cmath>
#include "ops/elementwise_common.h"
#include "backend/elementwise_kernels.h"
#include "amp/autocast_ops.h"

namespace dp {

using autograd::Node;
using autograd::variable_list;
using autograd::SavedVariable;
using ops::record;
using ops::unpack_output;

namespace {

// Runs a unary kernel into a fresh tensor of dtype ct (the input converted to ct first).
Tensor unary(const char* op, backend::UnaryOp k, const Tensor& a, DType ct) {
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  backend::unary_kernel(out.device().type, k, out, ops::to_dtype(a, ct));
  return out;
}

// Floating ops: integer and bool inputs compute (and return) the default float dtype.
Tensor floating(const char* op, backend::UnaryOp k, const Tensor& a) {
  ops::check_input(op, a);
  return unary(op, k, a, ops::to_float_dtype(a.dtype()));
}

}  // namespace

Tensor neg(const Tensor& a) {
  ops::check_input("neg", a);
  DP_CHECK(a.dtype() != kBool, DTypeError,
           "neg: Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use the `~` or "
           "`logical_not()` operator instead.");
  Tensor out = unary("neg", backend::UnaryOp::Neg, a, a.dtype());
  if (autograd::needs_grad(a)) record("NegBackward0", {&a}, out, [](Node&, const Tensor& g) { return variable_list{dp::neg(g)}; });
  return out;
}

Tensor abs(const Tensor& a) {
  ops::check_input("abs", a);
  DP_CHECK(a.dtype() != kBool, DTypeError, "abs: not implemented for bool tensors");
  Tensor out = unary("abs", backend::UnaryOp::Abs, a, a.dtype());
  if (autograd::needs_grad(a)) {
    record("AbsBackward0", {&a}, out,
           [sa = SavedVariable(a, false)](Node& n, const Tensor& g) { return variable_list{dp::mul(g, dp::sign(sa.unpack(&n)))}; });
  }
  return out;
}

Tensor sign(const Tensor& a) {
  ops::check_input("sign", a);
  Tensor out = unary("sign", backend::UnaryOp::Sign, a, a.dtype());
  if (autograd::needs_grad(a)) {
    // Zero almost everywhere (PyTorch's SignBackward0 gives zeros).
    record("SignBackward0", {&a}, out,
           [sizes = a.sizes(), dt = a.dtype()](Node&, const Tensor& g) { return variable_list{ops::zeros_of(sizes, dt, g.device())}; });
  }
  return out;
}

Tensor square(const Tensor& a) {
  ops::check_input("square", a);
  // pow(a, 2): bool squares to int64 as in PyTorch.
  const DType ct = a.dtype() == kBool ? kInt64 : a.dtype();
  Tensor out = unary("square", backend::UnaryOp::Square, a, ct);
  if (autograd::needs_grad(a)) {
    record("PowBackward0", {&a}, out,
           [sa = SavedVariable(a, false)](Node& n, const Tensor& g) { return variable_list{dp::mul(g, dp::mul(sa.unpack(&n), 2))}; });
  }
  return out;
}

Tensor exp(const Tensor& a) {
  if (autocast::detail::Cast ac{autocast::detail::Op::exp, {&a}}) return ac([&] { return dp::exp(ac[0]); });
  Tensor out = floating("exp", backend::UnaryOp::Exp, a);
  if (autograd::needs_grad(a)) {
    record("ExpBackward0", {&a}, out,
           [so = SavedVariable(out, true)](Node& n, const Tensor& g) { return variable_list{dp::mul(g, unpack_output(so, n))}; });
  }
  return out;
}

Tensor log(const Tensor& a) {
  if (autocast::detail::Cast ac{autocast::detail::Op::log, {&a}}) return ac([&] { return dp::log(ac[0]); });
  Tensor out = floating("log", backend::UnaryOp::Log, a);
  if (autograd::needs_grad(a)) {
    record("LogBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) { return variable_list{dp::div(g, sa.unpack(&n))}; });
  }
  return out;
}

Tensor log1p(const Tensor& a) {
  Tensor out = floating("log1p", backend::UnaryOp::Log1p, a);
  if (autograd::needs_grad(a)) {
    record("Log1PBackward0", {&a}, out,
           [sa = SavedVariable(a, false)](Node& n, const Tensor& g) { return variable_list{dp::div(g, dp::add(sa.unpack(&n), 1))}; });
  }
  return out;
}

Tensor sqrt(const Tensor& a) {
  Tensor out = floating("sqrt", backend::UnaryOp::Sqrt, a);
  if (autograd::needs_grad(a)) {
    record("SqrtBackward0", {&a}, out,
           [so = SavedVariable(out, true)](Node& n, const Tensor& g) { return variable_list{dp::div(g, dp::mul(unpack_output(so, n), 2))}; });
  }
  return out;
}

Tensor rsqrt(const Tensor& a) {
  if (autocast::detail::Cast ac{autocast::detail::Op::rsqrt, {&a}}) return ac([&] { return dp::rsqrt(ac[0]); });
  Tensor out = floating("rsqrt", backend::UnaryOp::Rsqrt, a);
  if (autograd::needs_grad(a)) {
    // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
    record("RsqrtBackward0", {&a}, out, [so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      return variable_list{dp::mul(g, dp::mul(dp::pow(unpack_output(so, n), 3), -0.5))};
    });
  }
  return out;
}

Tensor sin(const Tensor& a) {
  Tensor out = floating("sin", backend::UnaryOp::Sin, a);
  if (autograd::needs_grad(a)) {
    record("SinBackward0", {&a}, out,
           [sa = SavedVariable(a, false)](Node& n, const Tensor& g) { return variable_list{dp::mul(g, dp::cos(sa.unpack(&n)))}; });
  }
  return out;
}

Tensor cos(const Tensor& a) {
  Tensor out = floating("cos", backend::UnaryOp::Cos, a);
  if (autograd::needs_grad(a)) {
    record("CosBackward0", {&a}, out,
           [sa = SavedVariable(a, false)](Node& n, const Tensor& g) { return variable_list{dp::mul(g, dp::neg(dp::sin(sa.unpack(&n))))}; });
  }
  return out;
}

Tensor reciprocal(const Tensor& a) {
  if (autocast::detail::Cast ac{autocast::detail::Op::reciprocal, {&a}}) return ac([&] { return dp::reciprocal(ac[0]); });
  Tensor out = floating("reciprocal", backend::UnaryOp::Reciprocal, a);
  if (autograd::needs_grad(a)) {
    record("ReciprocalBackward0", {&a}, out, [so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      Tensor r = unpack_output(so, n);
      return variable_list{dp::mul(dp::neg(g), dp::mul(r, r))};
    });
  }
  return out;
}

// ---- clamp ----

namespace {

Tensor clamp_impl(const char* op, const char* node, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  ops::check_input(op, a);
  DP_CHECK(lo.has_value() || hi.has_value(), ValueError, op, ": At least one of 'min' or 'max' must not be None");
  ops::TypeState ts;
  ts.add(a);
  if (lo) ts.add(*lo);
  if (hi) ts.add(*hi);
  const DType ct = ts.result();
  DP_CHECK(ct != kBool, DTypeError, op, ": not implemented for bool tensors");
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  backend::clamp_kernel(out.device().type, out, ops::to_dtype(a, ct), lo, hi);
  if (autograd::needs_grad(a)) {
    record(node, {&a}, out, [sa = SavedVariable(a, false), lo, hi](Node& n, const Tensor& g) {
      Tensor x = sa.unpack(&n);
      Tensor mask = ops::new_output(x.sizes(), kBool, x.device());
      backend::clamp_mask_kernel(mask.device().type, mask, x, lo, hi);
      return variable_list{dp::where(mask, g, 0)};
    });
  }
  return out;
}

}  // namespace

Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) { return clamp_impl("clamp", "ClampBackward1", a, min, max); }
Tensor clamp_min(const Tensor& a, const Scalar& min) { return clamp_impl("clamp_min", "ClampMinBackward0", a, min, std::nullopt); }
Tensor clamp_max(const Tensor& a, const Scalar& max) { return clamp_impl("clamp_max", "ClampMaxBackward0", a, std::nullopt, max); }

}  // namespace dp
