// The layout decisions of the CUDA matrix products (cuda/gemm_plan.h), run on any machine built
// with the CUDA backend (they need no GPU): which operands are read in place through cuBLAS's
// transpose flags and leading dimensions, which are copied, how batches become strided-batched
// calls and host loops, the column-major argument swap, the compute type and TF32, and when the
// cuBLASLt bias epilogue applies. Also the dp::cuda::allow_tf32 switch.
#include <gtest/gtest.h>
#include <climits>
#include <vector>
#include "dp/core/shape.h"
#if DP_HAVE_CUDA
#include "dp/cuda/matmul.h"
#include "backend/cuda/gemm_plan.h"
#endif

namespace dp {
namespace {

#if DP_HAVE_CUDA
using backend::cuda::detail::ColumnMajorGemm;
using backend::cuda::detail::column_major;
using backend::cuda::detail::ComputeKind;
using backend::cuda::detail::compute_kind;
using backend::cuda::detail::GemmPlan;
using backend::cuda::detail::lt_bias_eligible;
using backend::cuda::detail::matrix_layout;
using backend::cuda::detail::MatrixLayout;
using backend::cuda::detail::plan_gemm;

using V = std::vector<int64_t>;

GemmPlan plan(const V& as, const V& ast, const V& bs, const V& bst, const V& cs) { return plan_gemm(as, ast, bs, bst, cs); }

TEST(CudaGemmPlan, MatrixLayoutRowAndColumnMajor) {
  EXPECT_EQ(matrix_layout(3, 4, 4, 1), (MatrixLayout{false, 4}));    // contiguous
  EXPECT_EQ(matrix_layout(3, 4, 10, 1), (MatrixLayout{false, 10}));  // rows of a wider matrix (narrow on the last dim)
  EXPECT_EQ(matrix_layout(3, 4, 1, 3), (MatrixLayout{true, 3}));     // x.t() of a contiguous [4, 3]
  EXPECT_EQ(matrix_layout(3, 4, 1, 7), (MatrixLayout{true, 7}));     // columns of a taller matrix, transposed
}

TEST(CudaGemmPlan, MatrixLayoutSizeOneDimsTakeAnyStride) {
  EXPECT_EQ(matrix_layout(1, 4, 999, 1), (MatrixLayout{false, 4}));  // one row: the row stride is irrelevant
  EXPECT_EQ(matrix_layout(4, 1, 1, 77), (MatrixLayout{false, 1}));   // one column with unit row stride
  EXPECT_EQ(matrix_layout(4, 1, 5, 0), (MatrixLayout{false, 5}));    // one column every 5 elements
  EXPECT_EQ(matrix_layout(1, 4, 0, 3), (MatrixLayout{true, 3}));     // a strided row read as a column
  EXPECT_EQ(matrix_layout(1, 1, 0, 0), (MatrixLayout{false, 1}));
}

TEST(CudaGemmPlan, MatrixLayoutRejectsWhatCuBlasCannotRead) {
  EXPECT_FALSE(matrix_layout(3, 4, 8, 2));                 // every other column: neither stride is 1
  EXPECT_FALSE(matrix_layout(3, 4, 2, 1));                 // overlapping rows (ld < cols)
  EXPECT_FALSE(matrix_layout(3, 4, 0, 1));                 // a broadcast row (expand)
  EXPECT_FALSE(matrix_layout(3, 4, 1, 2));                 // overlapping columns (ld < rows)
  EXPECT_FALSE(matrix_layout(3, 4, int64_t{1} << 32, 1));  // ld beyond cuBLAS's int
  EXPECT_EQ(matrix_layout(3, 4, INT_MAX, 1), (MatrixLayout{false, INT_MAX}));
}

TEST(CudaGemmPlan, PlainMatricesAndTransposedViews) {
  // [2, 3] @ [3, 5], both contiguous.
  GemmPlan p = plan({2, 3}, {3, 1}, {3, 5}, {5, 1}, {2, 5});
  EXPECT_FALSE(p.copy_a || p.copy_b);
  EXPECT_EQ(p.m, 2);
  EXPECT_EQ(p.n, 5);
  EXPECT_EQ(p.k, 3);
  EXPECT_EQ(p.a, (MatrixLayout{false, 3}));
  EXPECT_EQ(p.b, (MatrixLayout{false, 5}));
  EXPECT_EQ(p.ldc, 5);
  EXPECT_EQ(p.count, 1);
  EXPECT_EQ(p.calls(), 1);
  // x.t() @ w.t(): both read through the transpose flag, no copy.
  p = plan({2, 3}, {1, 2}, {3, 5}, {1, 3}, {2, 5});
  EXPECT_FALSE(p.copy_a || p.copy_b);
  EXPECT_EQ(p.a, (MatrixLayout{true, 2}));
  EXPECT_EQ(p.b, (MatrixLayout{true, 3}));
}

TEST(CudaGemmPlan, UnreadableOperandsAreCopied) {
  // A = X[:, ::2] of a contiguous [2, 6]; B fine.
  GemmPlan p = plan({2, 3}, {6, 2}, {3, 5}, {5, 1}, {2, 5});
  EXPECT_TRUE(p.copy_a);
  EXPECT_FALSE(p.copy_b);
  // B = a row expanded to [3, 5] (stride 0).
  p = plan({2, 3}, {3, 1}, {3, 5}, {0, 1}, {2, 5});
  EXPECT_FALSE(p.copy_a);
  EXPECT_TRUE(p.copy_b);
}

TEST(CudaGemmPlan, ColumnMajorSwapsOperandsAndSizes) {
  // Row-major C[m, n] = A[m, k] @ B[k, n] is column-major C^T = B^T A^T: B first, (n, m, k).
  const ColumnMajorGemm g = column_major(/*trans_a=*/true, /*trans_b=*/false, 2, 5, 3, /*lda=*/2, /*ldb=*/5, /*ldc=*/5);
  EXPECT_FALSE(g.trans_first);
  EXPECT_TRUE(g.trans_second);
  EXPECT_EQ(g.m, 5);
  EXPECT_EQ(g.n, 2);
  EXPECT_EQ(g.k, 3);
  EXPECT_EQ(g.ld_first, 5);
  EXPECT_EQ(g.ld_second, 2);
  EXPECT_EQ(g.ldc, 5);
}

TEST(CudaGemmPlan, ColumnMajorLeadingDimensionsSatisfyCuBlas) {
  // cuBLAS: lda >= max(1, op N ? m : k), ldb >= max(1, op N ? k : n), ldc >= max(1, m), over
  // every readable layout of small matrices.
  for (int64_t m : {1, 2, 5})
    for (int64_t n : {1, 3, 4})
      for (int64_t k : {1, 2, 6})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            const int64_t lda = ta ? m : k, ldb = tb ? k : n;
            const auto la = matrix_layout(m, k, ta ? 1 : lda, ta ? lda : 1), lb = matrix_layout(k, n, tb ? 1 : ldb, tb ? ldb : 1);
            ASSERT_TRUE(la && lb);
            const ColumnMajorGemm g = column_major(la->trans, lb->trans, m, n, k, la->ld, lb->ld, n);
            EXPECT_GE(g.ld_first, std::max<int64_t>(1, g.trans_first ? g.k : g.m)) << m << n << k << ta << tb;
            EXPECT_GE(g.ld_second, std::max<int64_t>(1, g.trans_second ? g.n : g.k)) << m << n << k << ta << tb;
            EXPECT_GE(g.ldc, std::max<int64_t>(1, g.m));
          }
}

TEST(CudaGemmPlan, BmmIsOneStridedBatchedCall) {
  GemmPlan p = plan({5, 2, 3}, {6, 3, 1}, {5, 3, 4}, {12, 4, 1}, {5, 2, 4});
  EXPECT_EQ(p.count, 5);
  EXPECT_EQ(p.stride_a, 6);
  EXPECT_EQ(p.stride_b, 12);
  EXPECT_EQ(p.stride_c, 8);
  EXPECT_TRUE(p.outer_sizes.empty());
  EXPECT_FALSE(p.folded_rows);
  // a.transpose(1, 2) of a contiguous [5, 3, 2]: transposed matrices, same batch stride.
  p = plan({5, 2, 3}, {6, 1, 2}, {5, 3, 4}, {12, 4, 1}, {5, 2, 4});
  EXPECT_EQ(p.a, (MatrixLayout{true, 2}));
  EXPECT_EQ(p.count, 5);
  EXPECT_EQ(p.stride_a, 6);
}

TEST(CudaGemmPlan, SharedWeightFoldsBatchIntoRows) {
  // [5, 2, 3] @ [3, 4] (linear on a 3-D input, matmul with a 2-D weight): one GEMM of 10 rows.
  GemmPlan p = plan({5, 2, 3}, {6, 3, 1}, {3, 4}, {4, 1}, {5, 2, 4});
  EXPECT_TRUE(p.folded_rows);
  EXPECT_EQ(p.m, 10);
  EXPECT_EQ(p.a, (MatrixLayout{false, 3}));
  EXPECT_EQ(p.count, 1);
  EXPECT_EQ(p.calls(), 1);
  // Rows of a wider buffer (row stride 8) still fold when the batch stride continues them.
  p = plan({5, 2, 3}, {16, 8, 1}, {3, 4}, {4, 1}, {5, 2, 4});
  EXPECT_TRUE(p.folded_rows);
  EXPECT_EQ(p.a.ld, 8);
  // B with leading size-1 batch dims counts as shared too.
  p = plan({5, 2, 3}, {6, 3, 1}, {1, 3, 4}, {12, 4, 1}, {5, 2, 4});
  EXPECT_TRUE(p.folded_rows);
}

TEST(CudaGemmPlan, SharedWeightWithoutFoldingIsStridedWithZeroStride) {
  // A's batch stride skips memory (every other matrix): no fold, B read with batch stride 0.
  GemmPlan p = plan({3, 2, 3}, {12, 3, 1}, {3, 4}, {4, 1}, {3, 2, 4});
  EXPECT_FALSE(p.folded_rows);
  EXPECT_EQ(p.count, 3);
  EXPECT_EQ(p.stride_a, 12);
  EXPECT_EQ(p.stride_b, 0);
  // Transposed A matrices never fold (their rows are not contiguous).
  p = plan({3, 2, 3}, {6, 1, 2}, {3, 4}, {4, 1}, {3, 2, 4});
  EXPECT_FALSE(p.folded_rows);
  EXPECT_EQ(p.count, 3);
  EXPECT_EQ(p.stride_b, 0);
}

TEST(CudaGemmPlan, SharedLeftOperandIsStridedWithZeroStride) {
  // [2, 3] @ [4, 3, 5]: A broadcast over the batch.
  GemmPlan p = plan({2, 3}, {3, 1}, {4, 3, 5}, {15, 5, 1}, {4, 2, 5});
  EXPECT_FALSE(p.folded_rows);
  EXPECT_EQ(p.count, 4);
  EXPECT_EQ(p.stride_a, 0);
  EXPECT_EQ(p.stride_b, 15);
  EXPECT_EQ(p.stride_c, 10);
}

TEST(CudaGemmPlan, UniformBatchDimsMerge) {
  // [2, 3, m, k] @ [2, 3, k, n], contiguous: 6 GEMMs in one call; size-1 dims are skipped.
  GemmPlan p = plan({2, 3, 2, 3}, {18, 6, 3, 1}, {2, 3, 3, 4}, {36, 12, 4, 1}, {2, 3, 2, 4});
  EXPECT_EQ(p.count, 6);
  EXPECT_TRUE(p.outer_sizes.empty());
  p = plan({2, 1, 3, 2, 3}, {18, 18, 6, 3, 1}, {2, 1, 3, 3, 4}, {36, 36, 12, 4, 1}, {2, 1, 3, 2, 4});
  EXPECT_EQ(p.count, 6);
  EXPECT_TRUE(p.outer_sizes.empty());
}

TEST(CudaGemmPlan, MixedBroadcastLoopsOverOuterDims) {
  // [2, 1, 2, 3] @ [1, 4, 3, 5] -> [2, 4, 2, 5]: inner dim (4) strided with A stride 0, the outer
  // dim (2) a host loop with B stride 0.
  GemmPlan p = plan({2, 1, 2, 3}, {6, 6, 3, 1}, {1, 4, 3, 5}, {60, 15, 5, 1}, {2, 4, 2, 5});
  EXPECT_FALSE(p.folded_rows);
  EXPECT_EQ(p.count, 4);
  EXPECT_EQ(p.stride_a, 0);
  EXPECT_EQ(p.stride_b, 15);
  EXPECT_EQ(p.stride_c, 10);
  ASSERT_EQ(p.outer_sizes, (V{2}));
  EXPECT_EQ(p.outer_a, (V{6}));
  EXPECT_EQ(p.outer_b, (V{0}));
  EXPECT_EQ(p.outer_c, (V{40}));
  EXPECT_EQ(p.calls(), 2);
  int64_t oa = -1, ob = -1, oc = -1;
  p.offsets(1, oa, ob, oc);
  EXPECT_EQ(oa, 6);
  EXPECT_EQ(ob, 0);
  EXPECT_EQ(oc, 40);
}

TEST(CudaGemmPlan, OffsetsEnumerateEveryBatchEntryOnce) {
  // Non-uniform strides in two outer dims: every (outer, inner) batch index maps to the right
  // matrices, as a naive walk over the broadcast batch computes them.
  const V as = {3, 1, 4, 2, 3}, ast = {100, 0, 7, 3, 1};  // A: batch [3, 1, 4], matrices 2x3 (row stride 3)
  const V bs = {1, 5, 4, 3, 2}, bst = {0, 30, 6, 2, 1};   // B: batch [1, 5, 4]
  const V cs = {3, 5, 4, 2, 2};
  GemmPlan p = plan(as, ast, bs, bst, cs);
  ASSERT_FALSE(p.copy_a || p.copy_b);
  EXPECT_EQ(p.calls() * p.count, 60);
  std::vector<int> seen(60, 0);
  for (int64_t i = 0; i < p.calls(); ++i) {
    int64_t oa, ob, oc;
    p.offsets(i, oa, ob, oc);
    for (int64_t j = 0; j < p.count; ++j) {
      const int64_t c = oc + j * p.stride_c, a = oa + j * p.stride_a, b = ob + j * p.stride_b;
      ASSERT_EQ(c % 4, 0);
      const int64_t e = c / 4;  // batch entry (C matrices are 2x2)
      const int64_t d0 = e / 20, d1 = (e / 4) % 5, d2 = e % 4;
      EXPECT_EQ(a, d0 * 100 + d2 * 7) << e;
      EXPECT_EQ(b, d1 * 30 + d2 * 6) << e;
      ++seen[e];
    }
  }
  for (int e = 0; e < 60; ++e) EXPECT_EQ(seen[e], 1) << e;
}

TEST(CudaGemmPlan, ComputeKindAndTf32) {
  EXPECT_EQ(compute_kind(kFloat32, false), ComputeKind::F32);
  EXPECT_EQ(compute_kind(kFloat32, true), ComputeKind::F32FastTF32);
  EXPECT_EQ(compute_kind(kFloat16, true), ComputeKind::F32);  // half types: fp32 accumulation, TF32 irrelevant
  EXPECT_EQ(compute_kind(kBFloat16, false), ComputeKind::F32);
  EXPECT_EQ(compute_kind(kFloat64, true), ComputeKind::F64);
  for (DType t : {kInt64, kInt32, kUInt8, kBool}) EXPECT_FALSE(compute_kind(t, false)) << dtype_name(t);
}

TEST(CudaGemmPlan, LtBiasEpilogueOnlyForOnePackedBiasRow) {
  const GemmPlan single = plan({4, 3}, {3, 1}, {3, 5}, {1, 3}, {4, 5});
  EXPECT_TRUE(lt_bias_eligible(kFloat32, single, V{5}, V{1}, 1, 1));
  EXPECT_TRUE(lt_bias_eligible(kFloat16, single, V{1, 5}, V{5, 1}, 1, 1));
  EXPECT_TRUE(lt_bias_eligible(kBFloat16, single, V{5}, V{1}, 1, 1));
  EXPECT_FALSE(lt_bias_eligible(kFloat64, single, V{5}, V{1}, 1, 1));        // fp64: cuBLAS with the bias copied in
  EXPECT_FALSE(lt_bias_eligible(kFloat32, single, V{5}, V{2}, 1, 1));        // not packed
  EXPECT_FALSE(lt_bias_eligible(kFloat32, single, V{4, 5}, V{5, 1}, 1, 1));  // a full matrix
  EXPECT_FALSE(lt_bias_eligible(kFloat32, single, V{4, 1}, V{1, 1}, 1, 1));  // a column
  EXPECT_FALSE(lt_bias_eligible(kFloat32, single, V{1}, V{1}, 1, 1));        // one value broadcast to 5
  EXPECT_FALSE(lt_bias_eligible(kFloat32, single, V{}, V{}, 1, 1));          // 0-dim
  EXPECT_FALSE(lt_bias_eligible(kFloat32, single, V{5}, V{1}, 2, 1));        // alpha != 1
  EXPECT_FALSE(lt_bias_eligible(kFloat32, single, V{5}, V{1}, 1, 0.5));      // beta != 1
  const GemmPlan one_col = plan({4, 3}, {3, 1}, {3, 1}, {1, 1}, {4, 1});
  EXPECT_TRUE(lt_bias_eligible(kFloat32, one_col, V{1}, V{7}, 1, 1));  // n == 1: any stride
  const GemmPlan folded = plan({2, 4, 3}, {12, 3, 1}, {3, 5}, {1, 3}, {2, 4, 5});
  EXPECT_TRUE(folded.folded_rows);
  EXPECT_TRUE(lt_bias_eligible(kFloat32, folded, V{5}, V{1}, 1, 1));
  const GemmPlan batched = plan({2, 4, 3}, {12, 3, 1}, {2, 3, 5}, {15, 5, 1}, {2, 4, 5});
  EXPECT_FALSE(lt_bias_eligible(kFloat32, batched, V{5}, V{1}, 1, 1));
}

TEST(CudaGemmPlan, WorkspaceSizes) {
  EXPECT_EQ(backend::cuda::detail::workspace_bytes(8), int64_t{4} << 20);
  EXPECT_EQ(backend::cuda::detail::workspace_bytes(9), int64_t{32} << 20);
  EXPECT_EQ(backend::cuda::detail::workspace_bytes(10), int64_t{32} << 20);
}

TEST(CudaMatmulSettings, AllowTf32DefaultsOffAndToggles) {
  EXPECT_FALSE(cuda::allow_tf32());  // PyTorch's default since 1.12
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  cuda::set_allow_tf32(false);
  EXPECT_FALSE(cuda::allow_tf32());
}
#else
TEST(CudaGemmPlan, NeedsTheCudaBackend) { GTEST_SKIP() << "built without the CUDA backend (DP_HAVE_CUDA is off)"; }
#endif

}  // namespace
}  // namespace dp
