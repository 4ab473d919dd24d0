#pragma once
// 2-D convolution (torch.nn.functional.conv2d), float32, float64 and bfloat16 (float32 arithmetic,
// each result rounded once, as PyTorch's CPU convolution; float16 on CUDA devices only), NCHW.
// input, weight and bias share one dtype; gradients come back in it.
//
//   Tensor y = dp::conv2d(x, w, b, /*stride=*/{2, 2}, /*padding=*/{1, 1});
//
// input [N, C, H, W] (or unbatched [C, H, W], giving an unbatched result), weight
// [OC, C / groups, KH, KW], bias [OC] or undefined. stride, padding and dilation take one value
// (used for both dims) or two (height, width). Differentiable w.r.t. input, weight and bias, to any
// order (the gradients are themselves convolutions recorded with autograd).
#include <cstdint>
#include "dp/core/tensor.h"

namespace dp {

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntArrayRef stride = {1, 1}, IntArrayRef padding = {0, 0},
              IntArrayRef dilation = {1, 1}, int64_t groups = 1);

// The two halves of conv2d's backward, exposed for tests and for ops built on them (a transposed
// convolution is conv2d_backward_input). Both are differentiable.
//   conv2d_backward_input:  d(sum(conv2d(x, w) * grad_output)) / dx, x of size input_size [N, C, H, W]
//   conv2d_backward_weight: d(sum(conv2d(x, w) * grad_output)) / dw, w of size weight_size
Tensor conv2d_backward_input(IntArrayRef input_size, const Tensor& grad_output, const Tensor& weight, IntArrayRef stride, IntArrayRef padding,
                             IntArrayRef dilation, int64_t groups);
Tensor conv2d_backward_weight(IntArrayRef weight_size, const Tensor& input, const Tensor& grad_output, IntArrayRef stride, IntArrayRef padding,
                              IntArrayRef dilation, int64_t groups);

}  // namespace dp
