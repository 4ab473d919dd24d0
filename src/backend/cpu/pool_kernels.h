#pragma once
// The CPU backend's 2-D pooling (pool_kernels.cpp): the implementations of
// backend/pool_kernels.h (contracts, Pool2dGeometry) on host memory; the ops call
// kernels::max_pool2d_kernel etc., which pick the backend.
#include <cstdint>
#include <optional>
#include "backend/pool_kernels.h"
#include "dp/core/tensor.h"

namespace dp::kernels {

void max_pool2d_kernel_cpu(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dGeometry& g);
void max_pool2d_backward_kernel_cpu(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices, const Pool2dGeometry& g);
void avg_pool2d_kernel_cpu(const Tensor& out, const Tensor& input, const Pool2dGeometry& g, bool count_include_pad,
                           std::optional<int64_t> divisor_override);
void avg_pool2d_backward_kernel_cpu(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g, bool count_include_pad,
                                    std::optional<int64_t> divisor_override);
void adaptive_avg_pool2d_kernel_cpu(const Tensor& out, const Tensor& input, const Pool2dGeometry& g);
void adaptive_avg_pool2d_backward_kernel_cpu(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g);

}  // namespace dp::kernels
