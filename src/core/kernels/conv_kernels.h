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
#include "dp/core/tensor.h"

namespace dp::kernels {

struct Conv2dGeometry {
  int64_t N, C, H, W;  // input [N, C, H, W]
  int64_t OC, KH, KW;  // weight [OC, C / groups, KH, KW]
  int64_t OH, OW;      // output [N, OC, OH, OW]
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups;

  int64_t group_in() const { return C / groups; }
  int64_t group_out() const { return OC / groups; }
  int64_t group_k() const { return group_in() * KH * KW; }
  // A 1x1 kernel read at every input position: columns = the input itself.
  bool is_pointwise() const { return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

// All tensors: contiguous, one dtype, on the CPU (float32, float64 or bfloat16; bfloat16 computes
// in float32 and rounds each result once) or all on one CUDA device (then the call goes to cuDNN:
// src/cuda/conv.h); sizes as in Conv2dGeometry.
// `out` is fresh (any contents); `bias` may be undefined.
void conv2d_forward_kernel(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g);

// Computes whichever of grad_input, grad_weight, grad_bias is defined (fresh tensors of the input,
// weight and [OC] sizes, any contents; they are overwritten). `input` is needed only for
// grad_weight, `weight` only for grad_input. Per image, grad_output is read by both GEMMs while it
// is still in cache.
void conv2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& input,
                            const Tensor& weight, const Tensor& grad_output, const Conv2dGeometry& g);

}  // namespace dp::kernels
