#pragma once
// 2-D convolution kernels (no autograd; src/ops/conv.cpp checks arguments and records gradients).
//
// Each image and group is one GEMM on OpenBLAS over im2col columns:
//   forward:        out[OCg, P]  = W[OCg, Kg] @ cols[Kg, P]                 (+ bias)
//   weight grad:    gW[OCg, Kg] += gout[OCg, P] @ cols[Kg, P]^T            (bias grad: gout @ 1)
//   input grad:     dcols[Kg, P] = W[OCg, Kg]^T @ gout[OCg, P], then col2im (scatter-add) into gx
// with Kg = C/groups * KH * KW and P = OH * OW. A 1x1 kernel with stride 1 and no padding needs no
// columns: the input plane block is the column matrix itself, and the input gradient is written by
// the GEMM directly. Columns are built per image (they stay in L2 next to the GEMM that reads them)
// in one buffer reused across images.
#include <cstdint>
#include "backend/conv_kernels.h"
#include "dp/core/tensor.h"

namespace dp::kernels {

// The CPU backend's implementations of backend/conv_kernels.h (contracts and Conv2dGeometry there;
// the ops call kernels::conv2d_forward_kernel etc., which pick the backend): float32, float64 or
// bfloat16 (bfloat16 computes in float32 and rounds each result once).
void conv2d_forward_kernel_cpu(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g);
// Per image, grad_output is read by both GEMMs while it is still in cache.
void conv2d_backward_kernel_cpu(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& input,
                                const Tensor& weight, const Tensor& grad_output, const Conv2dGeometry& g);

}  // namespace dp::kernels
