// The layout decisions of the CUDA matrix products (see gemm_plan.h). Plain C++.
#include "backend/cuda/gemm_plan.h"

#include <algorithm>
#include <climits>

namespace dp::backend::cuda::detail {

std::optional<MatrixLayout> matrix_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const int64_t one_c = std::max<int64_t>(1, cols), one_r = std::max<int64_t>(1, rows);
  // cuBLAS takes 32-bit leading dimensions: a larger one is copied (to ld = cols) like any other
  // unreadable layout.
  auto fits = [](int64_t ld) { return ld <= INT_MAX; };
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= one_c)) {
    const int64_t ld = rows <= 1 ? one_c : rs;
    if (fits(ld)) return MatrixLayout{false, ld};
  }
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= one_r)) {
    const int64_t ld = cols <= 1 ? one_r : cs;
    if (fits(ld)) return MatrixLayout{true, ld};
  }
  return std::nullopt;
}

int64_t GemmPlan::calls() const {
  int64_t c = 1;
  for (int64_t s : outer_sizes) c *= s;
  return c;
}

void GemmPlan::offsets(int64_t i, int64_t& off_a, int64_t& off_b, int64_t& off_c) const {
  off_a = off_b = off_c = 0;
  for (size_t d = outer_sizes.size(); d-- > 0;) {
    const int64_t r = i % outer_sizes[d];
    i /= outer_sizes[d];
    off_a += r * outer_a[d];
    off_b += r * outer_b[d];
    off_c += r * outer_c[d];
  }
}

namespace {

// X's stride for each dim of `batch` (X's batch dims aligned from the right; 0 where X lacks the
// dim or has size 1 there, i.e. where it is broadcast).
std::vector<int64_t> batch_strides(IntArrayRef sizes, IntArrayRef strides, size_t nbatch) {
  const size_t xb = sizes.size() - 2;
  std::vector<int64_t> st(nbatch, 0);
  for (size_t j = 0; j < nbatch; ++j) {
    if (j + xb < nbatch) continue;
    const size_t d = j + xb - nbatch;
    if (sizes[d] != 1) st[j] = strides[d];
  }
  return st;
}

// The row stride of A's batch dims and row dim read as one [count*m, k] row-major matrix, if they
// fold (each dim's stride is the next inner one's stride times its size; size-1 dims are free).
std::optional<int64_t> fold_rows(IntArrayRef batch, const std::vector<int64_t>& sa, int64_t m, int64_t row_stride, int64_t k) {
  int64_t ld = -1, expected = 0;
  auto step = [&](int64_t size, int64_t stride) {
    if (size == 1) return true;
    if (ld < 0) {
      if (stride < std::max<int64_t>(1, k)) return false;
      ld = stride;
    } else if (stride != expected) {
      return false;
    }
    expected = stride * size;
    return true;
  };
  if (!step(m, row_stride)) return std::nullopt;
  for (size_t j = batch.size(); j-- > 0;)
    if (!step(batch[j], sa[j])) return std::nullopt;
  return ld < 0 ? std::max<int64_t>(1, k) : ld;
}

}  // namespace

GemmPlan plan_gemm(IntArrayRef a_sizes, IntArrayRef a_strides, IntArrayRef b_sizes, IntArrayRef b_strides, IntArrayRef c_sizes) {
  GemmPlan p;
  const size_t na = a_sizes.size(), nb = b_sizes.size(), nc = c_sizes.size();
  p.m = c_sizes[nc - 2];
  p.n = c_sizes[nc - 1];
  p.k = a_sizes[na - 1];
  p.ldc = std::max<int64_t>(1, p.n);
  const auto la = matrix_layout(p.m, p.k, a_strides[na - 2], a_strides[na - 1]);
  const auto lb = matrix_layout(p.k, p.n, b_strides[nb - 2], b_strides[nb - 1]);
  p.copy_a = !la;
  p.copy_b = !lb;
  if (p.copy_a || p.copy_b) return p;
  p.a = *la;
  p.b = *lb;

  const size_t nbatch = nc - 2;
  const IntArrayRef batch(c_sizes.data(), nbatch);
  const std::vector<int64_t> sa = batch_strides(a_sizes, a_strides, nbatch), sb = batch_strides(b_sizes, b_strides, nbatch);
  std::vector<int64_t> sc(nbatch);
  int64_t step_c = p.m * p.n;
  for (size_t j = nbatch; j-- > 0;) {
    sc[j] = step_c;
    step_c *= batch[j];
  }
  const int64_t count = numel_of(batch);

  // B shared by every batch entry and A's rows folding: one GEMM of count*m rows.
  if (nbatch > 0 && count > 1 && !p.a.trans && std::all_of(sb.begin(), sb.end(), [](int64_t s) { return s == 0; }) && count * p.m <= INT_MAX) {
    if (auto ld = fold_rows(batch, sa, p.m, a_strides[na - 2], p.k)) {
      p.m *= count;
      p.a.ld = *ld;
      p.folded_rows = true;
      return p;
    }
  }

  // The innermost batch dims (size > 1) with uniform strides in A, B and C: one strided call.
  size_t j = nbatch;
  while (j > 0 && batch[j - 1] == 1) --j;
  if (j > 0) {
    --j;
    p.count = batch[j];
    p.stride_a = sa[j];
    p.stride_b = sb[j];
    p.stride_c = sc[j];
    while (j > 0) {
      const size_t d = j - 1;
      if (batch[d] == 1) {
        j = d;
        continue;
      }
      const bool uniform = sa[d] == p.stride_a * p.count && sb[d] == p.stride_b * p.count && sc[d] == p.stride_c * p.count;
      if (!uniform || p.count * batch[d] > INT_MAX) break;
      p.count *= batch[d];
      j = d;
    }
    // Whatever is left outside is looped over (size-1 dims dropped).
    for (size_t d = 0; d < j; ++d) {
      if (batch[d] == 1) continue;
      p.outer_sizes.push_back(batch[d]);
      p.outer_a.push_back(sa[d]);
      p.outer_b.push_back(sb[d]);
      p.outer_c.push_back(sc[d]);
    }
  }
  return p;
}

ColumnMajorGemm column_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  ColumnMajorGemm g;
  g.trans_first = trans_b;
  g.trans_second = trans_a;
  g.m = n;
  g.n = m;
  g.k = k;
  g.ld_first = ldb;
  g.ld_second = lda;
  g.ldc = ldc;
  return g;
}

std::optional<ComputeKind> compute_kind(DType dtype, bool allow_tf32) {
  switch (dtype) {
    case DType::Float32:
      return allow_tf32 ? ComputeKind::F32FastTF32 : ComputeKind::F32;
    case DType::Float16:
    case DType::BFloat16:
      return ComputeKind::F32;
    case DType::Float64:
      return ComputeKind::F64;
    default:
      return std::nullopt;
  }
}

bool lt_bias_eligible(DType dtype, const GemmPlan& plan, IntArrayRef bias_sizes, IntArrayRef bias_strides, double alpha, double beta) {
  if (dtype != DType::Float32 && dtype != DType::Float16 && dtype != DType::BFloat16) return false;
  if (plan.copy_a || plan.copy_b || plan.count != 1 || !plan.outer_sizes.empty()) return false;
  if (plan.m < 1 || plan.n < 1 || plan.k < 1 || alpha != 1.0 || beta != 1.0) return false;
  const size_t nd = bias_sizes.size();
  if (nd < 1 || nd > 2 || (nd == 2 && bias_sizes[0] != 1)) return false;
  return bias_sizes[nd - 1] == plan.n && (plan.n == 1 || bias_strides[nd - 1] == 1);
}

int64_t workspace_bytes(int major) { return (major >= 9 ? int64_t{32} : int64_t{4}) << 20; }

}  // namespace dp::backend::cuda::detail
