#pragma once
// The kernel interface of the element-wise ops: one signature per kernel, implemented by the CPU
// backend (src/backend/cpu/elementwise_*.cpp) and the CUDA backend (src/backend/cuda/elementwise_*.cu), both
// instantiations of the shared templates of backend/elementwise_impl.h. The ops call them
// through the entries kernels::add_kernel etc. at the end of this file, which pick the device type
// from the output.
//
// Every input already has the compute dtype (out's dtype unless stated) and broadcasts to out's
// shape; out may be exactly one of the inputs (in place), never a partial overlap. Inputs are on
// out's device, except a CPU 0-dim tensor (a "scalar tensor") with an output on a device, which
// that device's backend copies over; a device input with a CPU output is a DeviceError.
#include <optional>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// Unary ops. The floating ones need a floating out (and input of out's dtype).
enum class UnaryOp {
  Neg,
  Abs,
  Sign,
  Square,
  Relu,  // numeric
  Exp,
  Log,
  Log1p,
  Sqrt,
  Rsqrt,
  Sin,
  Cos,
  Reciprocal,
  Sigmoid,
  Tanh,  // floating
  Gelu,
  GeluTanh,
  Silu,
  Softplus,
};

// First-order backward kernels of the activations: out = g * f'(x) (x is the input, or y the
// output where noted); g, x/y and out share one floating dtype.
enum class ActGrad { ReluFromOut, SigmoidFromOut, TanhFromOut, Gelu, GeluTanh, Silu, Softplus };

// Comparisons: out is bool, a and b the compute dtype.
enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge };

// out = f(a, b): mul, div (floating dtypes only), pow, maximum, minimum.
using BinaryKernel = void(const Tensor& out, const Tensor& a, const Tensor& b);
// Two tensors and a Scalar: add (out = a + alpha * b; bool: a || (alpha && b)), lerp (a, end, weight),
// where_scalar (cond, a, b: cond is bool, a has out's dtype).
using BinaryScalarKernel = void(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& s);
// out = f(a, s): rsub_scalar (s - a), mul_scalar, div_scalar (a / s), pow_scalar.
using TensorScalarKernel = void(const Tensor& out, const Tensor& a, const Scalar& s);
// out = f(s, a): rdiv_scalar (s / a), rpow_scalar (s ^ a).
using ScalarTensorKernel = void(const Tensor& out, const Scalar& s, const Tensor& a);
// add_scalar: out = a + alpha * s (s and alpha cast to out's dtype first, as PyTorch wraps them).
using AddScalarKernel = void(const Tensor& out, const Tensor& a, const Scalar& s, const Scalar& alpha);
// out = weight of a in the gradient of maximum (is_max) / minimum: 1 where a wins, 0.5 on ties.
using ExtremumWeightKernel = void(const Tensor& out, const Tensor& a, const Tensor& b, bool is_max);
// where: cond is bool; a, b have out's dtype.
using WhereKernel = void(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// out = self + value * a * b  /  self + value * a / b
using PointwiseKernel = void(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value);
using UnaryKernel = void(UnaryOp op, const Tensor& out, const Tensor& a);
// clamp with optional bounds (at least one given; NaN stays NaN), and the in-bounds mask of its
// gradient: out (bool) = lo <= a <= hi (missing bounds pass).
using ClampKernel = void(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi);
using ActivationBackwardKernel = void(ActGrad op, const Tensor& out, const Tensor& g, const Tensor& xy);
using CompareKernel = void(CmpOp op, const Tensor& out, const Tensor& a, const Tensor& b);
using CompareScalarKernel = void(CmpOp op, const Tensor& out, const Tensor& a, const Scalar& s);
// logical_not: out (bool) = !a, a of any dtype.
using LogicalNotKernel = void(const Tensor& out, const Tensor& a);

DP_DECLARE_KERNEL(add_stub, BinaryScalarKernel);
DP_DECLARE_KERNEL(add_scalar_stub, AddScalarKernel);
DP_DECLARE_KERNEL(rsub_scalar_stub, TensorScalarKernel);
DP_DECLARE_KERNEL(mul_stub, BinaryKernel);
DP_DECLARE_KERNEL(mul_scalar_stub, TensorScalarKernel);
DP_DECLARE_KERNEL(div_stub, BinaryKernel);
DP_DECLARE_KERNEL(div_scalar_stub, TensorScalarKernel);
DP_DECLARE_KERNEL(rdiv_scalar_stub, ScalarTensorKernel);
DP_DECLARE_KERNEL(pow_stub, BinaryKernel);
DP_DECLARE_KERNEL(pow_scalar_stub, TensorScalarKernel);
DP_DECLARE_KERNEL(rpow_scalar_stub, ScalarTensorKernel);
DP_DECLARE_KERNEL(maximum_stub, BinaryKernel);
DP_DECLARE_KERNEL(minimum_stub, BinaryKernel);
DP_DECLARE_KERNEL(extremum_weight_stub, ExtremumWeightKernel);
DP_DECLARE_KERNEL(lerp_stub, BinaryScalarKernel);
DP_DECLARE_KERNEL(where_stub, WhereKernel);
DP_DECLARE_KERNEL(where_scalar_stub, BinaryScalarKernel);
DP_DECLARE_KERNEL(addcmul_stub, PointwiseKernel);
DP_DECLARE_KERNEL(addcdiv_stub, PointwiseKernel);
DP_DECLARE_KERNEL(unary_stub, UnaryKernel);
DP_DECLARE_KERNEL(clamp_stub, ClampKernel);
DP_DECLARE_KERNEL(clamp_mask_stub, ClampKernel);
DP_DECLARE_KERNEL(activation_backward_stub, ActivationBackwardKernel);
DP_DECLARE_KERNEL(compare_stub, CompareKernel);
DP_DECLARE_KERNEL(compare_scalar_stub, CompareScalarKernel);
DP_DECLARE_KERNEL(logical_not_stub, LogicalNotKernel);

}  // namespace dp::backend

// The entries the ops call (the names the kernels had before the table): the output's device type
// picks the backend.
namespace dp::kernels {

using backend::ActGrad;
using backend::CmpOp;
using backend::UnaryOp;

inline void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  backend::add_stub(out.device().type, out, a, b, alpha);
}
inline void add_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s, const Scalar& alpha) {
  backend::add_scalar_stub(out.device().type, out, a, s, alpha);
}
inline void rsub_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) { backend::rsub_scalar_stub(out.device().type, out, a, s); }
inline void mul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { backend::mul_stub(out.device().type, out, a, b); }
inline void mul_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) { backend::mul_scalar_stub(out.device().type, out, a, s); }
inline void div_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { backend::div_stub(out.device().type, out, a, b); }
inline void div_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) { backend::div_scalar_stub(out.device().type, out, a, s); }
inline void rdiv_scalar_kernel(const Tensor& out, const Scalar& s, const Tensor& a) { backend::rdiv_scalar_stub(out.device().type, out, s, a); }
inline void pow_kernel(const Tensor& out, const Tensor& a, const Tensor& e) { backend::pow_stub(out.device().type, out, a, e); }
inline void pow_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& e) { backend::pow_scalar_stub(out.device().type, out, a, e); }
inline void rpow_scalar_kernel(const Tensor& out, const Scalar& base, const Tensor& e) { backend::rpow_scalar_stub(out.device().type, out, base, e); }
inline void maximum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { backend::maximum_stub(out.device().type, out, a, b); }
inline void minimum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { backend::minimum_stub(out.device().type, out, a, b); }
inline void extremum_weight_kernel(const Tensor& out, const Tensor& a, const Tensor& b, bool is_max) {
  backend::extremum_weight_stub(out.device().type, out, a, b, is_max);
}
inline void lerp_kernel(const Tensor& out, const Tensor& a, const Tensor& end, const Scalar& weight) {
  backend::lerp_stub(out.device().type, out, a, end, weight);
}
inline void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  backend::where_stub(out.device().type, out, cond, a, b);
}
inline void where_scalar_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Scalar& b) {
  backend::where_scalar_stub(out.device().type, out, cond, a, b);
}
inline void addcmul_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  backend::addcmul_stub(out.device().type, out, self, a, b, value);
}
inline void addcdiv_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  backend::addcdiv_stub(out.device().type, out, self, a, b, value);
}
inline void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& a) { backend::unary_stub(out.device().type, op, out, a); }
inline void clamp_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  backend::clamp_stub(out.device().type, out, a, lo, hi);
}
inline void clamp_mask_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  backend::clamp_mask_stub(out.device().type, out, a, lo, hi);
}
inline void activation_backward_kernel(ActGrad op, const Tensor& out, const Tensor& g, const Tensor& xy) {
  backend::activation_backward_stub(out.device().type, op, out, g, xy);
}
inline void compare_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Tensor& b) { backend::compare_stub(out.device().type, op, out, a, b); }
inline void compare_scalar_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Scalar& s) {
  backend::compare_scalar_stub(out.device().type, op, out, a, s);
}
inline void logical_not_kernel(const Tensor& out, const Tensor& a) { backend::logical_not_stub(out.device().type, out, a); }

}  // namespace dp::kernels
