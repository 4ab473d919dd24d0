#pragma once
// Matrix products on CUDA devices through cuBLAS and cuBLASLt (src/backend/cuda/blas.cpp; the layout
// decisions are cuda/gemm_plan.h). The CUDA side of the products in ops/linalg.cpp and of fused ops
// that call GEMMs on raw device memory (the LSTM).
//
//  - float32: fp32 arithmetic, or TF32 tensor cores when dp::cuda::allow_tf32() and the op accepts
//    it (tf32_ok); float64: fp64; float16/bfloat16: inputs and output in that type, accumulation
//    in fp32 (CUBLAS_COMPUTE_32F). Integers and bool: DTypeError naming the op (cuBLAS has no
//    integer GEMM; PyTorch's CUDA products refuse them too).
//  - Transposed and batch-strided operands are passed with cuBLAS's transpose flags and leading
//    dimensions, never copied; a matrix whose last two dims are neither row- nor column-contiguous
//    is copied to a contiguous tensor first.
//  - Work is queued on the current stream of the output's device; nothing waits for it. The
//    cuBLAS handle is per (thread, device), its workspace comes from the caching allocator.
//  - A failing cuBLAS call is a DeviceError (OutOfMemory for CUBLAS_STATUS_ALLOC_FAILED) naming
//    the call, the op, the sizes and the dtype.
#include "dp/core/tensor.h"

namespace dp::backend::cuda {

// C [*batch, m, n] (contiguous, on a CUDA device) = alpha * A @ B + beta * C, for A [*ba, m, k] and
// B [*bb, k, n] of C's dtype on C's device whose batch dims broadcast to `batch`. beta == 0: C's
// contents are ignored (it may be uninitialised). k == 0 gives beta * C.
void matmul_into(const Tensor& C, const Tensor& A, const Tensor& B, double alpha, double beta, const char* op, bool tf32_ok = true);

// C [m, n] (contiguous) = A [m, k] @ B [k, n] + bias, bias (C's dtype and device) broadcast to
// [m, n]. A bias that is one packed row ([n] or [1, n], Linear's and addmm's usual case) in
// float32/float16/bfloat16 is added by the GEMM itself (one cuBLASLt call, bias epilogue); otherwise,
// or when cuBLASLt has no algorithm for the layout, the bias is copied into C and the GEMM adds onto it.
void matmul_bias_kernel(const Tensor& C, const Tensor& A, const Tensor& B, const Tensor& bias, const char* op);

// Row-major C[m, n] (row stride ldc) = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C on raw memory of
// `dtype` on cuda:`device` (trans_a: A holds op(A)^T row-major, as backend::cpu::blas::gemm). lda/ldb
// must be valid row strides of what A and B hold (>= their column counts). m, n or k may be 0;
// k == 0 needs beta 0 (C zero-filled) or 1 (C unchanged).
void gemm(int device, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, double beta, void* c, int64_t ldc, const char* op, bool tf32_ok = true);

}  // namespace dp::backend::cuda
