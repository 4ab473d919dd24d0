#pragma once
// The tensor ops that sequence models need (attention masks, sampling, packed sequences), with
// PyTorch's names, arguments and semantics. Each is differentiable where PyTorch's is.
#include <optional>
#include <string>
#include <utility>
#include "dp/core/tensor.h"

namespace dp {

class Generator;

// torch.tril / torch.triu: the lower (upper) triangle of the last two dims, the rest zero.
// `diagonal` shifts the kept triangle (0: main diagonal; > 0 above it; < 0 below it).
Tensor tril(const Tensor& a, int64_t diagonal = 0);
Tensor triu(const Tensor& a, int64_t diagonal = 0);

// torch.topk: (values, indices) of the k largest (largest = false: smallest) along dim, 0 <= k <=
// size (else IndexError); equal values are taken in index order, NaN counts as the largest.
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// torch.sort (always stable, NaN sorted as the largest value) and torch.argsort; indices int64.
std::pair<Tensor, Tensor> sort(const Tensor& a, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& a, int64_t dim = -1, bool descending = false);

// torch.cumsum; integer and bool inputs give int64 (as PyTorch).
Tensor cumsum(const Tensor& a, int64_t dim);

// torch.multinomial: num_samples indices per row of the probabilities `a` ([C] or [N, C]; need
// not sum to one; non-negative, finite, not all zero; without replacement at least num_samples of
// them non-zero), int64, drawn from `gen` (nullptr: the device's default generator).
Tensor multinomial(const Tensor& a, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);

// torch.baddbmm: beta * self + alpha * (batch1 @ batch2); batch1 [B, n, m], batch2 [B, m, p],
// self broadcastable to [B, n, p].
Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, const Scalar& beta = 1, const Scalar& alpha = 1);

// torch.einsum: "ij,jk->ik", "bhqd,bhkd->bhqk", "i,j->ij", "ij->ji", "ij->i", "...ij,...jk->...ik",
// implicit output ("ij,jk": NumPy's rule), size-1 dims broadcast, any number of operands (contracted
// left to right, each pair with one batched matrix product). A subscript repeated within one operand
// (a diagonal, "ii->i") is a NotImplementedError. Errors name the equation and the operand.
Tensor einsum(const std::string& equation, const TensorList& operands);

// torch.repeat_interleave: each element (dim unset: of the flattened tensor) repeated `repeats`
// times, or repeats[i] times for element i along dim.
Tensor repeat_interleave(const Tensor& a, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);

// Tensor::masked_fill_ (in place): where mask is true, value.
Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Scalar& value);

}  // namespace dp
