#pragma once
// How a reduction walks its input, as a host-side plan both backends' reduce kernels use (the CPU's
// run_reduce in backend/cpu/reduce.h, the CUDA reduce kernels), and the shape side of a reduction
// (which dims, the result's shape) that the ops and the kernels share.
#include <cstdint>
#include <vector>
#include "dp/core/shape.h"
#include "dp/core/tensor.h"

namespace dp::backend {

struct ReducePlan {
  // Kept dims, outermost first: size, input stride, output stride (elements).
  std::vector<int64_t> ksize, kin, kout;
  // Reduced dims, outermost first: size, input stride (elements).
  std::vector<int64_t> rsize, rin;
  int64_t out_numel = 1;
  int64_t red_numel = 1;
};

// in_sizes/in_strides: the input's layout. reduced[d]: dim d is reduced. out_strides[d]: the output
// stride (elements) of kept dim d (ignored for reduced dims). With reorder, both dim lists are sorted by
// decreasing input stride (broadcast dims first), which changes ridx unless at most one reduced dim
// has size > 1: fine for ops that ignore ridx (sum, max values, var, ...) and for single-dim index
// reductions. Without it the reduced dims keep their order, so ridx is the row-major index over them.
ReducePlan make_reduce_plan(IntArrayRef in_sizes, IntArrayRef in_strides, const std::vector<bool>& reduced, IntArrayRef out_strides, bool reorder);

// The plan for reducing `in` into `out` (contiguous, shaped as the reduction's result with or without
// the reduced dims kept).
ReducePlan make_reduce_plan(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, bool reorder);

// Marks the dims named in `dims` (all dims when empty) of an ndim-dim tensor. Negative dims wrap;
// a dim out of range or named twice is an IndexError naming `op`.
std::vector<bool> make_dim_mask(IntArrayRef dims, int64_t ndim, const char* op);
// The result shape: reduced dims dropped, or kept as size 1 with keepdim.
Shape reduced_shape(IntArrayRef sizes, const std::vector<bool>& mask, bool keepdim);
// Number of elements in the reduced dims.
int64_t reduced_numel(IntArrayRef sizes, const std::vector<bool>& mask);

}  // namespace dp::backend
