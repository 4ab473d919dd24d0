#pragma once
// The kernel interface of the index ops (src/ops/index.cpp: index_select, gather, scatter_add(_),
// index_add(_), embedding, one_hot, masked_fill), called after the op's argument checks, with the
// host-side pieces both backends share: reading index values on the host, the out-of-range
// IndexError, and the index plans (the operand views the CUDA index kernels run on).
//
// Index checks. Every index is checked before anything is written, so an out-of-range index is an
// IndexError naming the op, the value and the valid range, and never a partial write or a crash.
// The CPU kernels (src/backend/cpu/index.cpp) read every index on the host first. The CUDA kernels
// (src/backend/cuda/index.h) check on the device and report after the op's stream has caught up; the
// CUDA backend then re-reads the indices on the host to throw the CPU's exact message. `check`
// false skips that check (and its wait) where the indices were checked before: the backward
// passes. In-place ops call check_indices before they write.
#include <array>
#include <cstdint>
#include <vector>
#include "backend/kernel_stub.h"
#include "dp/core/scalar.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// ---- kernels ----

// out (contiguous, out.size(dim) == index.numel(); a.dim() >= 1) = a picked along dim by index
// (0-/1-D, int32 or int64).
using IndexSelect = void(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool check);
// self (at least 1-D) [..., index[j], ...] += src[..., j, ...] along dim; repeated indices add up.
using IndexAdd = void(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool check);
// out[p] = a[p with dim := index[p]] for p in index's extent; out, a and index at least 1-D with
// one dim count; out's elements beyond index's extent are left as they are.
using Gather = void(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool check);
// self[p with dim := index[p]] += src[p] for p in index's extent (self, index, src at least 1-D).
using ScatterAdd = void(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool check);
// Before an in-place op writes: the IndexError when a value of `index` lies outside [0, size)
// along dim (a backend whose kernels read every index before writing does nothing here).
using CheckIndices = void(const char* op, const Tensor& index, int64_t dim, int64_t size);
// out (indices.shape + [D], contiguous) = rows of weight [V, D] picked by indices (checked).
using EmbeddingForward = void(const Tensor& out, const Tensor& weight, const Tensor& indices);
// embedding's backward outside grad mode, fused: grad_weight [V, D] (zero-filled, contiguous) +=
// the rows of g (indices.shape + [D]) at their indices, nothing for padding_idx (-1: none); the
// indices were checked by the forward. Optional: the op writes it with dp ops where a backend has
// none.
using EmbeddingBackward = void(const Tensor& grad_weight, const Tensor& g, const Tensor& indices, int64_t padding_idx);
// out (indices.shape + [C], int64, zero-filled, contiguous) gets a 1 at each class position;
// `values` are indices' values in row-major order, read on the host and checked in [0, C).
using OneHot = void(const Tensor& out, const Tensor& indices, const std::vector<int64_t>& values);
// out = mask ? value : a, a and the bool mask broadcast to out's shape.
using MaskedFill = void(const Tensor& out, const Tensor& a, const Tensor& mask, const Scalar& value);

DP_DECLARE_KERNEL(index_select_kernel, IndexSelect);
DP_DECLARE_KERNEL(index_add_kernel, IndexAdd);
DP_DECLARE_KERNEL(gather_kernel, Gather);
DP_DECLARE_KERNEL(scatter_add_kernel, ScatterAdd);
DP_DECLARE_KERNEL(check_indices_kernel, CheckIndices);
DP_DECLARE_KERNEL(embedding_forward_kernel, EmbeddingForward);
DP_DECLARE_KERNEL(embedding_backward_kernel, EmbeddingBackward);
DP_DECLARE_KERNEL(one_hot_kernel, OneHot);
DP_DECLARE_KERNEL(masked_fill_kernel, MaskedFill);

// ---- host-side helpers (src/backend/index_kernels.cpp) ----

// Walks the positions of `sizes` in row-major order keeping one element offset per operand;
// f(i, offsets) gets the linear position i.
template <size_t N, typename F>
void strided_walk(IntArrayRef sizes, const std::array<Shape, N>& strides, F&& f) {
  const int64_t total = numel_of(sizes);
  if (total == 0) return;
  const int nd = static_cast<int>(sizes.size());
  std::vector<int64_t> idx(nd, 0);
  std::array<int64_t, N> off{};
  for (int64_t i = 0; i < total; ++i) {
    f(i, off);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < sizes[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * (sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

// The values of `index` (in host memory, any layout, int32 or int64) in row-major order,
// unchecked. Another dtype is the DTypeError naming `op`.
std::vector<int64_t> read_index_values(const char* op, const Tensor& index);
// The IndexError of a value outside [0, size) along dim.
[[noreturn]] void index_out_of_range(const char* op, int64_t v, int64_t dim, int64_t size);
// read_index_values, each value checked to lie in [0, size).
std::vector<int64_t> read_indices(const char* op, const Tensor& index, int64_t dim, int64_t size);

// ---- index plans (src/backend/index_plan.cpp) ----
//
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
namespace index_plan {

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

}  // namespace index_plan

}  // namespace dp::backend
