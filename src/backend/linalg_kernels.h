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

DP_DECLARE_KERNEL(matmul_kernel, Matmul);
DP_DECLARE_KERNEL(matmul_bias_kernel, MatmulBias);
DP_DECLARE_KERNEL(dot_kernel, Dot);
DP_DECLARE_KERNEL(outer_kernel, Outer);

}  // namespace dp::backend
