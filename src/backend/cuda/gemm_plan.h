#pragma once
// How a CUDA matrix product C = A @ B is laid out for cuBLAS, decided from sizes and strides alone
// (plain C++, no CUDA headers, so it is tested on machines without a GPU: tests/cuda/
// test_cuda_gemm_plan.cpp).
//
// Row-major C[m, n] = op(A)[m, k] @ op(B)[k, n] is, read column-major, C^T = op(B)^T @ op(A)^T,
// so cuBLAS is called with the operands swapped (B first) and m and n exchanged; a row-major
// operand that is stored transposed (x.t(): strides (1, ld)) is a plain column-major matrix, the
// other kind (strides (ld, 1)) a transposed one. Either way no copy is needed; only a matrix whose
// last two strides are neither (ld, 1) nor (1, ld) with ld large enough is copied first.
//
// Batches: C is a fresh contiguous [*batch, m, n]; A [*ba, m, k] and B [*bb, k, n] broadcast their
// batch dims to `batch` (stride 0 where a dim is broadcast: never materialised). The innermost batch
// dims whose strides are uniform in all three operands become one strided-batched call
// (cublasGemmStridedBatchedEx); any outer dims left are looped over on the host (one call each).
// When B has no batch (all its batch strides are 0) and A's batch and row dims fold into one row dim,
// the whole product is one plain GEMM with batch*m rows (linear on [B, T, in] inputs).
#include <cstdint>
#include <optional>
#include <vector>
#include "dp/core/dtype.h"
#include "dp/core/shape.h"

namespace dp::backend::cuda::detail {

// How a row-major rows x cols matrix with strides (rs, cs) is read without a copy: stored as is
// (trans = false, row stride ld >= cols) or as its transpose (trans = true, column stride ld >=
// rows); nullopt when neither holds. Size-1 dims take any stride.
struct MatrixLayout {
  bool trans = false;
  int64_t ld = 1;
  friend bool operator==(const MatrixLayout&, const MatrixLayout&) = default;
};
std::optional<MatrixLayout> matrix_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs);

// The cuBLAS calls for one product. Element offsets (not bytes) from each operand's data pointer.
struct GemmPlan {
  bool copy_a = false, copy_b = false;  // that operand must first be copied to a contiguous tensor
  int64_t m = 0, n = 0, k = 0;          // of each GEMM (m is batch*m when the rows folded)
  MatrixLayout a, b;                    // row-major reading of op(A) [m, k] and op(B) [k, n]
  int64_t ldc = 0;                      // = n (C is contiguous)
  int64_t count = 1;                    // GEMMs per strided-batched call
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // Host-loop dims outside the strided batch (outermost first), with each operand's stride.
  std::vector<int64_t> outer_sizes, outer_a, outer_b, outer_c;
  bool folded_rows = false;  // A's batch dims folded into m (one GEMM)

  int64_t calls() const;  // number of strided-batched (or plain) calls: product of outer_sizes
  // Element offsets of the call with index i (0 <= i < calls()), outer dims row-major.
  void offsets(int64_t i, int64_t& off_a, int64_t& off_b, int64_t& off_c) const;
};

// Plans C [*batch, m, n] (contiguous) = A @ B for A with a_sizes/a_strides (>= 2-D) and B likewise;
// c_sizes is C's shape. When copy_a or copy_b is set nothing else is filled in: copy that operand
// (contiguous, its own shape) and plan again.
GemmPlan plan_gemm(IntArrayRef a_sizes, IntArrayRef a_strides, IntArrayRef b_sizes, IntArrayRef b_strides, IntArrayRef c_sizes);

// The arguments of one column-major cuBLAS GEMM computing the row-major product the plan
// describes: first operand B, second A, sizes (n, m, k), C column-major [n, m] with ldc = n.
struct ColumnMajorGemm {
  bool trans_first = false, trans_second = false;  // CUBLAS_OP_T when true
  int64_t m = 0, n = 0, k = 0;
  int64_t ld_first = 0, ld_second = 0, ldc = 0;
};
ColumnMajorGemm column_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);

// The arithmetic a product runs in: fp32 (also for float16/bfloat16 inputs), fp32 with TF32 tensor
// cores (float32 only, when allowed and the op accepts it), fp64; nullopt for a dtype cuBLAS has
// no GEMM for (integers, bool).
enum class ComputeKind { F32, F32FastTF32, F64 };
std::optional<ComputeKind> compute_kind(DType dtype, bool allow_tf32);

// Whether C [m, n] = A @ B + bias can be one cuBLASLt call with the bias epilogue: a single GEMM
// (no batch) in float32/float16/bfloat16, and a bias that is one packed row of n values (shape [n]
// or [1, n], unit stride) added once (alpha = beta = 1).
bool lt_bias_eligible(DType dtype, const GemmPlan& plan, IntArrayRef bias_sizes, IntArrayRef bias_strides, double alpha, double beta);

// The cuBLAS workspace for a device of compute capability `major` (as PyTorch: 4 MiB, 32 MiB on
// Hopper and later, whose kernels use more).
int64_t workspace_bytes(int major);

}  // namespace dp::backend::cuda::detail
