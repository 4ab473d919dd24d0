#pragma once
// Reductions over dimensions, softmax family.
#include <optional>
#include <utility>
#include "dp/core/tensor.h"

namespace dp {

// dims empty = all dims. keepdim keeps reduced dims as size 1. Integer/bool sums give int64.
Tensor sum(const Tensor& a, std::optional<DType> dtype = std::nullopt);
Tensor sum(const Tensor& a, IntArrayRef dims, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, IntArrayRef dims, bool keepdim = false);
// Sums a broadcast gradient back down to `shape` (the inverse of expand).
Tensor sum_to(const Tensor& a, IntArrayRef shape);
Tensor max(const Tensor& a);  // 0-dim
Tensor min(const Tensor& a);
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);  // values, int64 indices
std::pair<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor amax(const Tensor& a, IntArrayRef dims, bool keepdim = false);
Tensor argmax(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// correction = 1 is the unbiased estimator (torch default).
Tensor var(const Tensor& a, IntArrayRef dims, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& a, IntArrayRef dims, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& a, IntArrayRef dims, bool keepdim = false);
Tensor norm(const Tensor& a, double p = 2.0);  // over all elements
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);

}  // namespace dp
