#pragma once
// The kernel interface of 2-D pooling: implemented by the CPU backend
// (src/backend/cpu/pool_kernels.cpp) and the CUDA backend (src/backend/cuda/norm_pool.cu), called by
// src/ops/pooling.cpp (which checks arguments and records gradients) through the entries
// backend::max_pool2d_kernel etc. below, which pick the backend from the first tensor's device
// type. No autograd inside. Every tensor is contiguous, float32, float64 or bfloat16 (indices
// int64; the CPU sums bfloat16 in float32 and rounds each result once), on one device, viewed as
// `planes` planes (N * C) of H x W input / OH x OW output. Window semantics are PyTorch's CPU
// kernels', element for element (clipping, divisors, NaN handling, index ties).
#include <cstdint>
#include <optional>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// The host plan of one pooling call, shared by both backends.
struct Pool2dGeometry {
  int64_t planes, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;  // unused by the adaptive kernels
};

// out = window maxima; indices = h * W + w of each maximum within its plane. The first maximum
// wins a tie and a NaN always wins (the last NaN of the window), as in PyTorch.
using MaxPool2dKernel = void(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dGeometry& g);
// grad_input (overwritten) = grad_output scattered (added) to `indices`.
using MaxPool2dBackwardKernel = void(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices, const Pool2dGeometry& g);
using AvgPool2dKernel = void(const Tensor& out, const Tensor& input, const Pool2dGeometry& g, bool count_include_pad,
                             std::optional<int64_t> divisor_override);
using AvgPool2dBackwardKernel = void(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g, bool count_include_pad,
                                     std::optional<int64_t> divisor_override);
// The adaptive forms (and their backward): out (grad_input) from input (grad_output).
using AdaptiveAvgPool2dKernel = void(const Tensor& out, const Tensor& input, const Pool2dGeometry& g);

DP_DECLARE_KERNEL(max_pool2d_kernel, MaxPool2dKernel);
DP_DECLARE_KERNEL(max_pool2d_backward_kernel, MaxPool2dBackwardKernel);
DP_DECLARE_KERNEL(avg_pool2d_kernel, AvgPool2dKernel);
DP_DECLARE_KERNEL(avg_pool2d_backward_kernel, AvgPool2dBackwardKernel);
DP_DECLARE_KERNEL(adaptive_avg_pool2d_kernel, AdaptiveAvgPool2dKernel);
DP_DECLARE_KERNEL(adaptive_avg_pool2d_backward_kernel, AdaptiveAvgPool2dKernel);

}  // namespace dp::backend

// The entries the ops call: the output's (the input gradient's) device type picks the backend.
