#pragma once
// How a BLAS GEMM reads a tensor's matrices in place (a trans flag and a leading dimension), a
// host-side plan beside the matrix product interface (linalg_kernels.h): linear (src/ops/linalg.cpp)
// uses it to view its input as one matrix without a copy, the CPU backend to call OpenBLAS.
#include <algorithm>
#include <cstdint>
#include <optional>
#include "dp/core/tensor.h"

namespace dp::backend {

// How BLAS reads a rows x cols matrix with strides (rs, cs), or nullopt when it cannot.
struct Layout {
  bool trans;
  int64_t ld;
};
inline std::optional<Layout> blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const int64_t one_c = std::max<int64_t>(1, cols), one_r = std::max<int64_t>(1, rows);
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= one_c)) return Layout{false, rows <= 1 ? one_c : rs};
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= one_r)) return Layout{true, cols <= 1 ? one_r : cs};
  return std::nullopt;
}

// If A's batch dims and row dim merge into one row dim (a [B*m, k] matrix with a fixed row
// stride), that row stride.
inline std::optional<int64_t> fold_rows(const Tensor& A, int64_t k) {
  int64_t ld = -1, expected = 0;
  for (int64_t d = A.dim() - 2; d >= 0; --d) {
    const int64_t sz = A.sizes()[d], st = A.strides()[d];
    if (sz == 1) continue;
    if (ld < 0) {
      if (st < std::max<int64_t>(1, k)) return std::nullopt;
      ld = st;
    } else if (st != expected) {
      return std::nullopt;
    }
    expected = st * sz;
  }
  return ld < 0 ? std::max<int64_t>(1, k) : ld;
}

}  // namespace dp::backend
