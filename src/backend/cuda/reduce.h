#pragma once
// The CUDA reductions (src/backend/cuda/reduce.cu) and softmax family (src/backend/cuda/softmax.cu): the CUDA
// backend of backend/reduce_kernels.h (registered in register_reduce_kernels.cpp), the semantics of
// the CPU kernels, for tensors on a CUDA device (out and in on one device). The work is queued on
// the current stream of out's device; nothing waits.
//
// Accumulation: float32, float16 and bfloat16 inputs accumulate in float32 (as PyTorch's CUDA
// reductions), float64 in float64, integer and bool sums in int64. Results are deterministic (a
// fixed reduction order, no atomics): the same input on the same GPU gives the same bits.
#include <vector>
#include "dp/core/tensor.h"
#include "backend/cuda/elementwise.h"

namespace dp::backend::cuda {

void sum_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim);
void mean_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim);
void minmax_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, bool is_max);
void minmax_index_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim, bool keepdim, bool is_max);
void var_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, int64_t correction, bool take_sqrt);
void logsumexp_kernel(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim);
void norm_kernel(const Tensor& out, const Tensor& in, double p);

void softmax_kernel(const Tensor& out, const Tensor& in, int64_t dim, bool log);
void softmax_backward_kernel(const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim, bool log);

}  // namespace dp::backend::cuda
