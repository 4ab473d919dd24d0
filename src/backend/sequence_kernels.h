#pragma once
// The kernel interface of the sequence-model ops (src/ops/sequence.cpp: tril/triu, sort/argsort,
// topk, cumsum, multinomial), implemented by the CPU backend (src/backend/cpu/sequence.cpp). The
// CUDA backend has none of them yet: the ops take a composite path there (tril/triu as a
// masked_fill) or run the CPU kernel on a host copy (see sequence.cpp).
//
// Every kernel reads its input as a contiguous [outer, n, inner] block (n the size of the op's dim,
// outer the product of the sizes before it, inner of those after it) and writes contiguous outputs
// of the same layout; the op makes the input contiguous first.
#include <cstdint>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// The [outer, n, inner] view of a contiguous tensor of `sizes` along `dim` (sizes may be empty: a
// 0-dim tensor is [1, 1, 1]).
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
inline DimSplit split_at(IntArrayRef sizes, int64_t dim) {
  DimSplit s;
  if (sizes.empty()) return s;
  for (int64_t d = 0; d < dim; ++d) s.outer *= sizes[d];
  s.n = sizes[dim];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(sizes.size()); ++d) s.inner *= sizes[d];
  return s;
}

// out (contiguous, a's shape and dtype, at least 2-D) = a (contiguous) with the elements outside
// the lower (lower = true: j - i <= diagonal) or upper (j - i >= diagonal) triangle of each matrix
// of the last two dims set to zero.
using Triangle = void(const Tensor& out, const Tensor& a, int64_t diagonal, bool lower);
// values (a's dtype) and indices (int64), both contiguous of a's shape, = each row of a (contiguous)
// along the dim of `split` sorted ascending (descending), stably, NaN counted larger than any number.
using Sort = void(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit split, bool descending);
// values and indices contiguous of a's shape with k at the dim of `split` (0 <= k <= split.n): the k
// largest (largest = false: smallest) elements of each row, NaN counted largest, equal values taken
// in index order. sorted: in order (descending for largest); otherwise in an unspecified order.
using TopK = void(const Tensor& values, const Tensor& indices, const Tensor& a, DimSplit split, int64_t k, bool largest, bool sorted);
// out (contiguous, a's shape and dtype: float16, bfloat16, float32, float64 or int64) = the running
// sums of a (contiguous) along the dim of `split`, from the end when `reverse` (out[i] = sum of
// a[j] for j >= i). Floating sums accumulate in float64.
using Cumsum = void(const Tensor& out, const Tensor& a, DimSplit split, bool reverse);
// out [rows, num_samples] (int64, contiguous) = category indices drawn from each row of probs
// [rows, categories] (floating, contiguous; already checked: non-negative, finite, no row summing
// to zero, and without replacement at least num_samples non-zero entries per row). The draws are
// Philox blocks reserved by the op, from `first` of `seed`: with replacement, sample s of row r
// reads the 64-bit word (r * num_samples + s) % 2 of block first + (r * num_samples + s) / 2 and
// inverts the row's cumulative distribution; without replacement, category c of row r reads word
// (r * categories + c) % 2 of block first + (r * categories + c) / 2 as a uniform u and the
// num_samples largest p / -log(u) win (the exponential race, as PyTorch), in decreasing order. (The
// op draws one sample without replacement as one with replacement: the same distribution.)
using Multinomial = void(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed, uint64_t first);
// The first invalid entry of probs [rows, categories] (floating, contiguous) for multinomial, or
// none: writes the problem into `bad` (row, column, value, kind) and returns false. kind: 1 negative,
// 2 infinite or NaN, 3 row sums to zero, 4 (without replacement) fewer than num_samples non-zero
// entries (column = that count).
struct MultinomialProblem {
  int64_t row = 0, column = 0;
  double value = 0;
  int kind = 0;
};
using MultinomialCheck = bool(const Tensor& probs, int64_t num_samples, bool replacement, MultinomialProblem& bad);

DP_DECLARE_KERNEL(triangle_kernel, Triangle);
DP_DECLARE_KERNEL(sort_kernel, Sort);
DP_DECLARE_KERNEL(topk_kernel, TopK);
DP_DECLARE_KERNEL(cumsum_kernel, Cumsum);
DP_DECLARE_KERNEL(multinomial_kernel, Multinomial);
DP_DECLARE_KERNEL(multinomial_check_kernel, MultinomialCheck);

}  // namespace dp::backend
