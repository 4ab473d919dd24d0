#pragma once
// How each index op maps onto the two CUDA index kernels (cuda/index.h), as plain C++ so the
// mapping is tested on any machine (tests/cuda/test_cuda_index_plan.cpp runs plans through a host
// copy of the kernels' loops and compares with the CPU ops).
//
// A plan is three views sharing one iteration shape: `it` (the output of a gather, or the tensor a
// scatter adds into), `src` and `index` (stride 0 where they broadcast), plus the stride of the
// indexed dim in the indexed tensor (`step`, elements), the valid index range [0, bound) and an
// index value that adds nothing (`skip`: embedding's padding row; -1 for none). The indexed
// tensor's view has stride 0 along the indexed dim; the kernel adds index * step itself:
//   gather:      it[p] = src[p + index[p] * step]
//   scatter-add: it[p + index[p] * step] += src[p]     (index[p] != skip)
#include <cstdint>
#include "dp/core/tensor.h"

namespace dp::index_plan {

struct IndexKernelPlan {
  Tensor it, src, index;
  int64_t step = 0, bound = 0, skip = -1;
};

// Gathers. index_select: out contiguous, out.size(dim) == index.numel(), a.dim() >= 1, index 0-/1-D.
IndexKernelPlan index_select(const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index);
// gather: a, index and out at least 1-D with one dim count; out's elements over index's extent.
IndexKernelPlan gather(const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index);
// embedding: out (indices.shape + [D], contiguous) = rows of weight [V, D].
IndexKernelPlan embedding(const Tensor& out, const Tensor& weight, const Tensor& indices);

// Scatter-adds. scatter_add: self, index, src at least 1-D with one dim count; over index's extent.
IndexKernelPlan scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// index_add: self and src at least 1-D, index 0-/1-D with src.size(dim) elements.
IndexKernelPlan index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// embedding's backward: grad_weight [V, D] (zero-filled, contiguous) += g (indices.shape + [D]).
IndexKernelPlan embedding_backward(const Tensor& grad_weight, const Tensor& g, const Tensor& indices, int64_t padding_idx);
// one_hot: out (indices.shape + [C], int64, zero-filled, contiguous) gets `one` (a 0-dim int64 1)
// at each class position.
IndexKernelPlan one_hot(const Tensor& out, const Tensor& one, const Tensor& indices);

}  // namespace dp::index_plan
