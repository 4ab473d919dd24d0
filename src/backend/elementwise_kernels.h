#pragma once
// The kernel interface of the element-wise ops: one signature per kernel, implemented by the CPU
// backend (src/backend/cpu/elementwise_*.cpp) and the CUDA backend (src/backend/cuda/elementwise_*.cu), both
// instantiations of the shared templates of backend/elementwise_impl.h. The ops call them
// through the entries backend::add_kernel etc. at the end of this file, which pick the device type
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
  NormalCdf,  // Phi(x) = (1 + erf(x / sqrt 2)) / 2
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

DP_DECLARE_KERNEL(add_kernel, BinaryScalarKernel);
DP_DECLARE_KERNEL(add_scalar_kernel, AddScalarKernel);
DP_DECLARE_KERNEL(rsub_scalar_kernel, TensorScalarKernel);
DP_DECLARE_KERNEL(mul_kernel, BinaryKernel);
DP_DECLARE_KERNEL(mul_scalar_kernel, TensorScalarKernel);
DP_DECLARE_KERNEL(div_kernel, BinaryKernel);
DP_DECLARE_KERNEL(div_scalar_kernel, TensorScalarKernel);
DP_DECLARE_KERNEL(rdiv_scalar_kernel, ScalarTensorKernel);
DP_DECLARE_KERNEL(pow_kernel, BinaryKernel);
DP_DECLARE_KERNEL(pow_scalar_kernel, TensorScalarKernel);
DP_DECLARE_KERNEL(rpow_scalar_kernel, ScalarTensorKernel);
DP_DECLARE_KERNEL(maximum_kernel, BinaryKernel);
DP_DECLARE_KERNEL(minimum_kernel, BinaryKernel);
DP_DECLARE_KERNEL(extremum_weight_kernel, ExtremumWeightKernel);
DP_DECLARE_KERNEL(lerp_kernel, BinaryScalarKernel);
DP_DECLARE_KERNEL(where_kernel, WhereKernel);
DP_DECLARE_KERNEL(where_scalar_kernel, BinaryScalarKernel);
DP_DECLARE_KERNEL(addcmul_kernel, PointwiseKernel);
DP_DECLARE_KERNEL(addcdiv_kernel, PointwiseKernel);
DP_DECLARE_KERNEL(unary_kernel, UnaryKernel);
DP_DECLARE_KERNEL(clamp_kernel, ClampKernel);
DP_DECLARE_KERNEL(clamp_mask_kernel, ClampKernel);
DP_DECLARE_KERNEL(activation_backward_kernel, ActivationBackwardKernel);
DP_DECLARE_KERNEL(compare_kernel, CompareKernel);
DP_DECLARE_KERNEL(compare_scalar_kernel, CompareScalarKernel);
DP_DECLARE_KERNEL(logical_not_kernel, LogicalNotKernel);

}  // namespace dp::backend

// The entries the ops call (the names the kernels had before the table): the output's device type
// picks the backend.
