// Unary math: neg, abs, sign, square, exp, log, log1p, sqrt, rsqrt, sin, cos, reciprocal, clamp —
// the unary kernel (shared with the activations) and the differentiable ops.
#include <cmath>
#include "core/kernels/elementwise_common.h"
#include "core/kernels/elementwise_kernels.h"

namespace dp {
namespace kernels {
namespace {

// Floating element functions, computed in M (float for the 16-bit types, else T).
struct ExpF { template <typename M> static DP_INLINE M f(M x) { return m_exp(x); } };
struct LogF { template <typename M> static DP_INLINE M f(M x) { return m_log(x); } };
struct Log1pF { template <typename M> static DP_INLINE M f(M x) { return m_log1p(x); } };
struct SqrtF { template <typename M> static DP_INLINE M f(M x) { return std::sqrt(x); } };
struct RsqrtF { template <typename M> static DP_INLINE M f(M x) { return M(1) / std::sqrt(x); } };
struct SinF { template <typename M> static DP_INLINE M f(M x) { return std::sin(x); } };
struct CosF { template <typename M> static DP_INLINE M f(M x) { return std::cos(x); } };
struct ReciprocalF { template <typename M> static DP_INLINE M f(M x) { return M(1) / x; } };
struct SigmoidF { template <typename M> static DP_INLINE M f(M x) { return sigmoid_f(x); } };
struct TanhF { template <typename M> static DP_INLINE M f(M x) { return m_tanh(x); } };
struct GeluF { template <typename M> static DP_INLINE M f(M x) { return gelu_f(x); } };
struct GeluTanhF { template <typename M> static DP_INLINE M f(M x) { return gelu_tanh_f(x); } };
struct SiluF { template <typename M> static DP_INLINE M f(M x) { return silu_f(x); } };
struct SoftplusF { template <typename M> static DP_INLINE M f(M x) { return softplus_f(x); } };

template <typename F>
void floating_unary(const Tensor& out, const Tensor& a, const char* name) {
  dispatch_floating(out.dtype(), name, [&]<typename T>() {
    using M = opmath_t<T>;
    launch<T, T>(out, [](T x) { return st<T>(F::template f<M>(om(x))); }, a);
  });
}

}  // namespace

void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& a) {
  switch (op) {
    case UnaryOp::Neg:
      dispatch_numeric(out.dtype(), "neg", [&]<typename T>() { launch<T, T>(out, [](T x) { return st<T>(wneg(om(x))); }, a); });
      return;
    case UnaryOp::Abs:
      dispatch_numeric(out.dtype(), "abs", [&]<typename T>() {
        if constexpr (std::is_unsigned_v<T>) launch<T, T>(out, [](T x) { return x; }, a);
        else if constexpr (is_float_v<T>) launch<T, T>(out, [](T x) { return st<T>(std::abs(om(x))); }, a);
        else launch<T, T>(out, [](T x) { return x < 0 ? wneg(x) : x; }, a);
      });
      return;
    case UnaryOp::Sign:
      if (out.dtype() == kBool) {
        launch<bool, bool>(out, [](bool x) { return x; }, a);
        return;
      }
      dispatch_numeric(out.dtype(), "sign", [&]<typename T>() {
        using M = opmath_t<T>;
        launch<T, T>(out, [](T x) { return st<T>(M((M(0) < om(x)) - (om(x) < M(0)))); }, a);
      });
      return;
    case UnaryOp::Square:
      dispatch_numeric(out.dtype(), "square", [&]<typename T>() { launch<T, T>(out, [](T x) { return st<T>(wmul(om(x), om(x))); }, a); });
      return;
    case UnaryOp::Relu:
      dispatch_numeric(out.dtype(), "relu", [&]<typename T>() {
        using M = opmath_t<T>;
        if constexpr (is_float_v<T>) launch<T, T>(out, [](T x) { return (om(x) > M(0) || om(x) != om(x)) ? x : st<T>(M(0)); }, a);
        else launch<T, T>(out, [](T x) { return x > st<T>(0) ? x : st<T>(0); }, a);
      });
      return;
    case UnaryOp::Exp: floating_unary<ExpF>(out, a, "exp"); return;
    case UnaryOp::Log: floating_unary<LogF>(out, a, "log"); return;
    case UnaryOp::Log1p: floating_unary<Log1pF>(out, a, "log1p"); return;
    case UnaryOp::Sqrt: floating_unary<SqrtF>(out, a, "sqrt"); return;
    case UnaryOp::Rsqrt: floating_unary<RsqrtF>(out, a, "rsqrt"); return;
    case UnaryOp::Sin: floating_unary<SinF>(out, a, "sin"); return;
    case UnaryOp::Cos: floating_unary<CosF>(out, a, "cos"); return;
    case UnaryOp::Reciprocal: floating_unary<ReciprocalF>(out, a, "reciprocal"); return;
    case UnaryOp::Sigmoid: floating_unary<SigmoidF>(out, a, "sigmoid"); return;
    case UnaryOp::Tanh: floating_unary<TanhF>(out, a, "tanh"); return;
    case UnaryOp::Gelu: floating_unary<GeluF>(out, a, "gelu"); return;
    case UnaryOp::GeluTanh: floating_unary<GeluTanhF>(out, a, "gelu"); return;
    case UnaryOp::Silu: floating_unary<SiluF>(out, a, "silu"); return;
    case UnaryOp::Softplus: floating_unary<SoftplusF>(out, a, "softplus"); return;
  }
}

void clamp_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  dispatch_numeric(out.dtype(), "clamp", [&]<typename T>() {
    using M = opmath_t<T>;
    // NaN compares false both ways, so it passes through unchanged.
    if (lo && hi) {
      const M l = om(scalar_to<T>(*lo)), h = om(scalar_to<T>(*hi));
      launch<T, T>(out, [l, h](T x) {
        M r = om(x) < l ? l : om(x);
        return st<T>(h < r ? h : r);
      }, a);
    } else if (lo) {
      const M l = om(scalar_to<T>(*lo));
      launch<T, T>(out, [l](T x) { return st<T>(om(x) < l ? l : om(x)); }, a);
    } else {
      const M h = om(scalar_to<T>(*hi));
      launch<T, T>(out, [h](T x) { return st<T>(h < om(x) ? h : om(x)); }, a);
    }
  });
}

void clamp_mask_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  dispatch_floating(a.dtype(), "clamp_backward", [&]<typename T>() {
    using M = opmath_t<T>;
    const M l = lo ? M(lo->to_double()) : -std::numeric_limits<M>::infinity();
    const M h = hi ? M(hi->to_double()) : std::numeric_limits<M>::infinity();
    launch<bool, T>(out, [l, h](T x) { return om(x) >= l && om(x) <= h; }, a);
  });
}

}  // namespace kernels

// ================================================================ differentiable ops

using autograd::Node;
using autograd::variable_list;
using autograd::SavedVariable;
using ops::record;
using ops::unpack_output;

namespace {

// Runs a unary kernel into a fresh tensor of dtype ct (the input converted to ct first).
Tensor unary(const char* op, kernels::UnaryOp k, const Tensor& a, DType ct) {
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  kernels::unary_kernel(k, out, ops::to_dtype(a, ct));
  return out;
}

// Floating ops: integer and bool inputs compute (and return) the default float dtype.
Tensor floating(const char* op, kernels::UnaryOp k, const Tensor& a) {
  ops::check_input(op, a);
  return unary(op, k, a, ops::to_float_dtype(a.dtype()));
}

}  // namespace

Tensor neg(const Tensor& a) {
  ops::check_input("neg", a);
  DP_CHECK(a.dtype() != kBool, DTypeError,
           "neg: Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use the `~` or "
           "`logical_not()` operator instead.");
  Tensor out = unary("neg", kernels::UnaryOp::Neg, a, a.dtype());
  if (autograd::needs_grad(a)) record("NegBackward0", {&a}, out, [](Node&, const Tensor& g) { return variable_list{dp::neg(g)}; });
  return out;
}

Tensor abs(const Tensor& a) {
  ops::check_input("abs", a);
  DP_CHECK(a.dtype() != kBool, DTypeError, "abs: not implemented for bool tensors");
  Tensor out = unary("abs", kernels::UnaryOp::Abs, a, a.dtype());
  if (autograd::needs_grad(a)) {
    record("AbsBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) {
      return variable_list{dp::mul(g, dp::sign(sa.unpack(&n)))};
    });
  }
  return out;
}

Tensor sign(const Tensor& a) {
  ops::check_input("sign", a);
  Tensor out = unary("sign", kernels::UnaryOp::Sign, a, a.dtype());
  if (autograd::needs_grad(a)) {
    // Zero almost everywhere (PyTorch's SignBackward0 gives zeros).
    record("SignBackward0", {&a}, out, [sizes = a.sizes(), dt = a.dtype()](Node&, const Tensor& g) {
      return variable_list{ops::zeros_of(sizes, dt, g.device())};
    });
  }
  return out;
}

Tensor square(const Tensor& a) {
  ops::check_input("square", a);
  // pow(a, 2): bool squares to int64 as in PyTorch.
  const DType ct = a.dtype() == kBool ? kInt64 : a.dtype();
  Tensor out = unary("square", kernels::UnaryOp::Square, a, ct);
  if (autograd::needs_grad(a)) {
    record("PowBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) {
      return variable_list{dp::mul(g, dp::mul(sa.unpack(&n), 2))};
    });
  }
  return out;
}

Tensor exp(const Tensor& a) {
  Tensor out = floating("exp", kernels::UnaryOp::Exp, a);
  if (autograd::needs_grad(a)) {
    record("ExpBackward0", {&a}, out, [so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      return variable_list{dp::mul(g, unpack_output(so, n))};
    });
  }
  return out;
}

Tensor log(const Tensor& a) {
  Tensor out = floating("log", kernels::UnaryOp::Log, a);
  if (autograd::needs_grad(a)) {
    record("LogBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) {
      return variable_list{dp::div(g, sa.unpack(&n))};
    });
  }
  return out;
}

Tensor log1p(const Tensor& a) {
  Tensor out = floating("log1p", kernels::UnaryOp::Log1p, a);
  if (autograd::needs_grad(a)) {
    record("Log1PBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) {
      return variable_list{dp::div(g, dp::add(sa.unpack(&n), 1))};
    });
  }
  return out;
}

Tensor sqrt(const Tensor& a) {
  Tensor out = floating("sqrt", kernels::UnaryOp::Sqrt, a);
  if (autograd::needs_grad(a)) {
    record("SqrtBackward0", {&a}, out, [so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      return variable_list{dp::div(g, dp::mul(unpack_output(so, n), 2))};
    });
  }
  return out;
}

Tensor rsqrt(const Tensor& a) {
  Tensor out = floating("rsqrt", kernels::UnaryOp::Rsqrt, a);
  if (autograd::needs_grad(a)) {
    // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
    record("RsqrtBackward0", {&a}, out, [so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      return variable_list{dp::mul(g, dp::mul(dp::pow(unpack_output(so, n), 3), -0.5))};
    });
  }
  return out;
}

Tensor sin(const Tensor& a) {
  Tensor out = floating("sin", kernels::UnaryOp::Sin, a);
  if (autograd::needs_grad(a)) {
    record("SinBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) {
      return variable_list{dp::mul(g, dp::cos(sa.unpack(&n)))};
    });
  }
  return out;
}

Tensor cos(const Tensor& a) {
  Tensor out = floating("cos", kernels::UnaryOp::Cos, a);
  if (autograd::needs_grad(a)) {
    record("CosBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) {
      return variable_list{dp::mul(g, dp::neg(dp::sin(sa.unpack(&n))))};
    });
  }
  return out;
}

Tensor reciprocal(const Tensor& a) {
  Tensor out = floating("reciprocal", kernels::UnaryOp::Reciprocal, a);
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
  kernels::clamp_kernel(out, ops::to_dtype(a, ct), lo, hi);
  if (autograd::needs_grad(a)) {
    record(node, {&a}, out, [sa = SavedVariable(a, false), lo, hi](Node& n, const Tensor& g) {
      Tensor x = sa.unpack(&n);
      Tensor mask = ops::new_output(x.sizes(), kBool, x.device());
      kernels::clamp_mask_kernel(mask, x, lo, hi);
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
