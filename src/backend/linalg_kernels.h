#pragma once
// The kernel interface of the matrix products (src/ops/linalg.cpp), implemented by the CPU backend
// (src/backend/cpu/linalg.cpp: OpenBLAS, reference integer loops) and the CUDA backend (cuBLAS /
// cuBLASLt, src/backend/cuda/blas.h). The op checks shapes and dtypes (no bool) first.
#include "backend/kernel_stub.h"
#include "dp/core/scalar.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// C [*batch, m, n] (contiguous) = alpha * A @ B + beta * C, for A [*ba, m, k] and B [*bb, k, n] of
// C's dtype on C's device whose batch dims broadcast to `batch` (a broadcast batch dim is read
// with stride 0, never materialised). beta == 0: C's contents are ignored (it may be
// uninitialised); k == 0 gives beta * C. tf32_ok: a float32 product may use TF32 where the device
// does and dp::cuda::allow_tf32() (dot passes false). A dtype the backend has no GEMM for is a
// DTypeError naming `op`.
using Matmul = void(const Tensor& C, const Tensor& A, const Tensor& B, const Scalar& alpha, const Scalar& beta, const char* op, bool tf32_ok);
// C [m, n] (contiguous) = A [m, k] @ B [k, n] + bias, bias (C's dtype and device) broadcast to
// [m, n]: Linear's and addmm's form (alpha = beta = 1), with the same numerics as copying the bias
// into C and calling matmul_kernel with beta 1. The CUDA backend adds a one-row bias in the GEMM's
// epilogue (one cuBLASLt call).
using MatmulBias = void(const Tensor& C, const Tensor& A, const Tensor& B, const Tensor& bias, const char* op);
// out (0-dim) = sum_i a[i] * b[i]; a, b 1-D of one length and out's dtype (any stride).
using Dot = void(const Tensor& out, const Tensor& a, const Tensor& b);
// out [n, m] (contiguous) = a[i] * b[j], a [n] and b [m] (any dtypes) converted to out's dtype.
using Outer = void(const Tensor& out, const Tensor& a, const Tensor& b);

// Linear's usual form straight to the backend's GEMM, without a w.t() view: C [rows, out_f]
// (contiguous) = X [rows, in] @ w^T (+ bias broadcast to [rows, out_f] when defined), w the weight
// [out_f, in] as given, all of one dtype on one device. Returns false, having written nothing, when
// the backend has no such path for these operands (dtype, strides, empty); the op then calls
// matmul_bias_kernel / matmul_kernel on a w.t() view, which gives the same values. A backend may
// leave it unregistered.
using LinearForward = bool(const Tensor& C, const Tensor& X, const Tensor& w, const Tensor& bias);
// Linear's backward when no graph is recorded (grad mode off), straight to the GEMMs: with G the
// output gradient `grad` as a [rows, out_f] matrix, dx = G @ w shaped as the input ([..., in], when
// w is defined) and dw = G^T @ X [out_f, in] (when x is defined), x and w being linear's input and
// weight, of grad's dtype and device type (the CPU's devices share host memory, so x and w may be on
// another of them, as after Module::to); rows, in, out_f > 0. The results are on grad's device.
// Returns false, having computed nothing, when the backend has no such path for these operands; the
// op then uses its differentiable formulas. A backend may leave it unregistered.
using LinearBackward = bool(const Tensor& grad, const Tensor& x, const Tensor& w, int64_t rows, int64_t in, int64_t out_f, Tensor& dx, Tensor& dw);

DP_DECLARE_KERNEL(matmul_kernel, Matmul);
DP_DECLARE_KERNEL(matmul_bias_kernel, MatmulBias);
DP_DECLARE_KERNEL(dot_kernel, Dot);
DP_DECLARE_KERNEL(outer_kernel, Outer);
DP_DECLARE_KERNEL(linear_forward_kernel, LinearForward);
DP_DECLARE_KERNEL(linear_backward_kernel, LinearBackward);

}  // namespace dp::backend
