#pragma once
// 2-D pooling kernels (no autograd; src/ops/pooling.cpp checks arguments and records gradients).
// Every tensor is contiguous, float32, float64 or bfloat16 (indices int64; bfloat16 sums in float32
// and rounds each result once), on the CPU or on one CUDA device (routed to
// src/cuda/norm_pool.cu, same semantics), viewed as `planes` planes
// (N * C) of H x W input / OH x OW output. Window semantics are PyTorch's CPU kernels', element
// for element (clipping, divisors, NaN handling, index ties).
#include <cstdint>
#include <optional>
#include "dp/core/tensor.h"

namespace dp::kernels {

struct Pool2dGeometry {
  int64_t planes, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;  // unused by the adaptive kernels
};

// out = window maxima; indices = h * W + w of each maximum within its plane. The first maximum
// wins a tie and a NaN always wins (the last NaN of the window), as in PyTorch.
void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dGeometry& g);
// grad_input (overwritten) = grad_output scattered (added) to `indices`.
void max_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices, const Pool2dGeometry& g);

void avg_pool2d_kernel(const Tensor& out, const Tensor& input, const Pool2dGeometry& g, bool count_include_pad,
                       std::optional<int64_t> divisor_override);
void avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g, bool count_include_pad,
                                std::optional<int64_t> divisor_override);

void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& input, const Pool2dGeometry& g);
void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g);

}  // namespace dp::kernels
