#pragma once
// The kernel interface of the reductions and the softmax family: implemented by the CPU backend
// (src/backend/cpu/reduce_*.cpp) and the CUDA backend (src/backend/cuda/reduce.cu, softmax.cu), called by
// src/ops/reduction*.cpp and softmax through the entries backend::sum_kernel etc. below, which pick
// the backend from the output's device type. out and in are on one device.
#include <cstdint>
#include <vector>
#include "backend/kernel_stub.h"
#include "dp/core/errors.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// `out` is a fresh contiguous tensor whose shape is the input shape with the reduced dims removed
// (or kept as 1 when keepdim); `reduced` marks the reduced dims of `in` (size in.dim()).
// sum (integer and bool inputs sum into int64), mean (floating), logsumexp.
using ReduceKernel = void(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim);
// max (is_max) or min values; NaN propagates.
using MinMaxKernel = void(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, bool is_max);
// Values and int64 indices along one dim (either may be undefined: argmax/argmin). Ties give the
// first index; NaN counts as the extreme and its first index wins.
using MinMaxIndexKernel = void(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim, bool keepdim, bool is_max);
// var (take_sqrt = false) or std with divisor max(0, N - correction).
using VarKernel = void(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, int64_t correction, bool take_sqrt);
// p-norm over all elements into a 0-dim out.
using NormKernel = void(const Tensor& out, const Tensor& in, double p);
// Softmax (log: log_softmax) over `dim` of a contiguous, non-empty input into a contiguous out of
// the same shape.
using SoftmaxKernel = void(const Tensor& out, const Tensor& in, int64_t dim, bool log);
// Gradient w.r.t. the input given grad g and output y (contiguous, non-empty, one shape and dtype):
//   softmax:     gin = y * (g - sum(g * y, dim))
//   log_softmax: gin = g - exp(y) * sum(g, dim)
using SoftmaxBackwardKernel = void(const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim, bool log);
// sum_to's common case (a bias's gradient, [rows, inner] -> [inner]) without the general
// reduction's plan: out (contiguous, `inner` elements) = the column sums of a (contiguous, viewed as
// [rows, inner]; float32 or float64, out's dtype), accumulated in double as sum_kernel's CPU kernel
// does. A fast path: only the CPU registers it (on CUDA the general reduction is one kernel).
using SumRowsKernel = void(const Tensor& out, const Tensor& a, int64_t rows, int64_t inner);

DP_DECLARE_KERNEL(sum_kernel, ReduceKernel);
DP_DECLARE_KERNEL(mean_kernel, ReduceKernel);
DP_DECLARE_KERNEL(minmax_kernel, MinMaxKernel);
DP_DECLARE_KERNEL(minmax_index_kernel, MinMaxIndexKernel);
DP_DECLARE_KERNEL(var_kernel, VarKernel);
DP_DECLARE_KERNEL(logsumexp_kernel, ReduceKernel);
DP_DECLARE_KERNEL(norm_kernel, NormKernel);
// The softmax family's view of a contiguous tensor around `dim`: [outer, dsize, inner], the
// reduced dim's elements `inner` apart. Both backends' kernels take it from here.
struct SoftmaxGeometry {
  int64_t outer = 1, dsize = 1, inner = 1;
};
SoftmaxGeometry softmax_geometry(const Tensor& t, int64_t dim);

DP_DECLARE_KERNEL(softmax_kernel, SoftmaxKernel);
DP_DECLARE_KERNEL(softmax_backward_kernel, SoftmaxBackwardKernel);
DP_DECLARE_KERNEL(sum_rows_kernel, SumRowsKernel);

// The contract of softmax_kernel / softmax_backward_kernel, checked by each backend's implementation
// first: contiguous tensors of one shape (and, backward, of one dtype). False for an empty input,
// which is a no-op.
inline bool check_softmax_args(const Tensor& out, const Tensor& in, bool log) {
  DP_CHECK(in.is_contiguous() && out.is_contiguous() && in.sizes() == out.sizes(), ValueError, log ? "log_softmax" : "softmax",
           ": kernel needs contiguous tensors of one shape");
  return in.numel() != 0;
}
inline bool check_softmax_backward_args(const Tensor& gin, const Tensor& g, const Tensor& y, bool log) {
  DP_CHECK(gin.is_contiguous() && g.is_contiguous() && y.is_contiguous() && g.sizes() == y.sizes() && gin.sizes() == y.sizes() &&
               g.dtype() == y.dtype() && gin.dtype() == y.dtype(),
           ValueError, log ? "log_softmax_backward" : "softmax_backward", ": kernel needs contiguous tensors of one shape and dtype");
  return y.numel() != 0;
}

}  // namespace dp::backend
