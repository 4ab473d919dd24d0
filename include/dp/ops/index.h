#pragma once
// Indexing ops: what Embedding, NLLLoss and their gradients need. Indices are int64 (or int32).
#include "dp/core/tensor.h"

namespace dp {

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// Rows of `weight` picked by `indices` of any shape: result shape indices.shape + [embedding_dim].
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);
Tensor one_hot(const Tensor& indices, int64_t num_classes);
Tensor masked_fill(const Tensor& a, const Tensor& mask, const Scalar& value);

}  // namespace dp
