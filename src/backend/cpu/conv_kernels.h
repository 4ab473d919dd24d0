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

namespace dp::backend::cpu {

// The CPU backend's implementations of backend/conv_kernels.h (contracts and Conv2dGeometry there;
// the ops call backend::conv2d_forward_kernel etc., which pick the backend): float32, float64 or
// bfloat16 (bfloat16 computes in float32 and rounds each result once).
Conv2dForwardKernel conv2d_forward_kernel;
// Per image, grad_output is read by both GEMMs while it is still in cache.
Conv2dBackwardKernel conv2d_backward_kernel;

}  // namespace dp::backend::cpu
