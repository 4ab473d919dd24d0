#pragma once
// Typed element-wise kernels without autograd, shared by the out-of-place ops and their in-place
// forms. Every input already has the compute dtype (out's dtype unless stated) and broadcasts to
// out's shape; out may be exactly one of the inputs (in place), never a partial overlap.
#include <optional>
#include "dp/core/tensor.h"

namespace dp::kernels {

// out = a + alpha * b (bool: a || (alpha && b)).
void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha);
// out = a + alpha * s (s and alpha cast to out's dtype first, as PyTorch wraps them).
void add_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s, const Scalar& alpha);
// out = s - a
void rsub_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s);
void mul_kernel(const Tensor& out, const Tensor& a, const Tensor& b);
void mul_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s);
// Floating dtypes only.
void div_kernel(const Tensor& out, const Tensor& a, const Tensor& b);
void div_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s);    // a / s
void rdiv_scalar_kernel(const Tensor& out, const Scalar& s, const Tensor& a);   // s / a
void pow_kernel(const Tensor& out, const Tensor& a, const Tensor& e);
void pow_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& e);
void rpow_scalar_kernel(const Tensor& out, const Scalar& base, const Tensor& e);
void maximum_kernel(const Tensor& out, const Tensor& a, const Tensor& b);
void minimum_kernel(const Tensor& out, const Tensor& a, const Tensor& b);
// out = weight of a in the gradient of maximum (is_max) / minimum: 1 where a wins, 0.5 on ties.
void extremum_weight_kernel(const Tensor& out, const Tensor& a, const Tensor& b, bool is_max);
void lerp_kernel(const Tensor& out, const Tensor& a, const Tensor& end, const Scalar& weight);
// cond is bool; a, b have out's dtype.
void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void where_scalar_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Scalar& b);
// out = self + value * a * b  /  self + value * a / b
void addcmul_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value);
void addcdiv_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value);

// Unary ops. The floating ones need a floating out (and input of out's dtype).
enum class UnaryOp {
  Neg, Abs, Sign, Square, Relu,                                                    // numeric
  Exp, Log, Log1p, Sqrt, Rsqrt, Sin, Cos, Reciprocal, Sigmoid, Tanh,               // floating
  Gelu, GeluTanh, Silu, Softplus,
};
void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& a);
// clamp with optional bounds (at least one given); NaN stays NaN.
void clamp_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi);
// In-bounds mask of clamp's gradient: out (bool) = lo <= a <= hi (missing bounds pass).
void clamp_mask_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi);

// First-order backward kernels of the activations: out = g * f'(x) (x is the input, or y the
// output where noted); g, x/y and out share one floating dtype.
enum class ActGrad { ReluFromOut, SigmoidFromOut, TanhFromOut, Gelu, GeluTanh, Silu, Softplus };
void activation_backward_kernel(ActGrad op, const Tensor& out, const Tensor& g, const Tensor& xy);

// Comparisons: out is bool, a and b the compute dtype.
enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge };
void compare_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void compare_scalar_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Scalar& s);
void logical_not_kernel(const Tensor& out, const Tensor& a);  // a of any dtype

}  // namespace dp::kernels
