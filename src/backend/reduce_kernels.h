#pragma once
// The kernel interface of the reductions and the softmax family: implemented by the CPU backend
// (src/backend/cpu/reduce_*.cpp) and the CUDA backend (src/backend/cuda/reduce.cu, softmax.cu), called by
// src/ops/reduction*.cpp and softmax through the entries kernels::sum_kernel etc. below, which pick
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
// [rows, inner]; float32 or float64, out's dtype), accumulated in double as sum_stub's CPU kernel
// does. A fast path: only the CPU registers it (on CUDA the general reduction is one kernel).
using SumRowsKernel = void(const Tensor& out, const Tensor& a, int64_t rows, int64_t inner);

DP_DECLARE_KERNEL(sum_stub, ReduceKernel);
DP_DECLARE_KERNEL(mean_stub, ReduceKernel);
DP_DECLARE_KERNEL(minmax_stub, MinMaxKernel);
DP_DECLARE_KERNEL(minmax_index_stub, MinMaxIndexKernel);
DP_DECLARE_KERNEL(var_stub, VarKernel);
DP_DECLARE_KERNEL(logsumexp_stub, ReduceKernel);
DP_DECLARE_KERNEL(norm_stub, NormKernel);
// The softmax family's view of a contiguous tensor around `dim`: [outer, dsize, inner], the
// reduced dim's elements `inner` apart. Both backends' kernels take it from here.
struct SoftmaxGeometry {
  int64_t outer = 1, dsize = 1, inner = 1;
};
SoftmaxGeometry softmax_geometry(const Tensor& t, int64_t dim);

DP_DECLARE_KERNEL(softmax_stub, SoftmaxKernel);
DP_DECLARE_KERNEL(softmax_backward_stub, SoftmaxBackwardKernel);
DP_DECLARE_KERNEL(sum_rows_stub, SumRowsKernel);

}  // namespace dp::backend

// The entries the ops call: the output's device type picks the backend.
namespace dp::kernels {

inline void sum_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  backend::sum_stub(out.device().type, out, in, reduced, keepdim);
}
inline void mean_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  backend::mean_stub(out.device().type, out, in, reduced, keepdim);
}
inline void minmax_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, bool is_max) {
  backend::minmax_stub(out.device().type, out, in, reduced, keepdim, is_max);
}
inline void minmax_index_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim, bool keepdim, bool is_max) {
  backend::minmax_index_stub((values.defined() ? values : indices).device().type, values, indices, in, dim, keepdim, is_max);
}
inline void var_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, int64_t correction, bool take_sqrt) {
  backend::var_stub(out.device().type, out, in, reduced, keepdim, correction, take_sqrt);
}
inline void logsumexp_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim) {
  backend::logsumexp_stub(out.device().type, out, in, reduced, keepdim);
}
inline void norm_kernel(const Tensor& out, const Tensor& in, double p) { backend::norm_stub(out.device().type, out, in, p); }

// Softmax family over `dim` of a contiguous input into a contiguous out of the same shape (the
// layout check is the caller's contract, checked here for both backends; an empty input is a no-op).
inline void softmax_kernel(const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  DP_CHECK(in.is_contiguous() && out.is_contiguous() && in.sizes() == out.sizes(), ValueError, log ? "log_softmax" : "softmax",
           ": kernel needs contiguous tensors of one shape");
  if (in.numel() == 0) return;
  backend::softmax_stub(out.device().type, out, in, dim, log);
}
inline void softmax_backward_kernel(const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim, bool log) {
  DP_CHECK(gin.is_contiguous() && g.is_contiguous() && y.is_contiguous() && g.sizes() == y.sizes() && gin.sizes() == y.sizes() &&
               g.dtype() == y.dtype() && gin.dtype() == y.dtype(),
           ValueError, log ? "log_softmax_backward" : "softmax_backward", ": kernel needs contiguous tensors of one shape and dtype");
  if (y.numel() == 0) return;
  backend::softmax_backward_stub(gin.device().type, gin, g, y, dim, log);
}

}  // namespace dp::kernels
