#pragma once
// The kernel interface of 2-D convolution: implemented by the CPU backend
// (src/backend/cpu/conv_kernels.cpp: im2col + GEMM) and the CUDA backend (src/backend/cuda/conv.cpp:
// cuDNN), called by src/ops/conv.cpp (which checks arguments and records gradients) through the
// entries backend::conv2d_forward_kernel / conv2d_backward_kernel below. No autograd inside.
#include <cstdint>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// The host plan of one convolution, shared by both backends.
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

// All tensors: contiguous, one dtype, all on one device; sizes as in Conv2dGeometry. `out` is
// fresh (any contents); `bias` may be undefined.
using Conv2dForwardKernel = void(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g);
// Computes whichever of grad_input, grad_weight, grad_bias is defined (fresh tensors of the input,
// weight and [OC] sizes, any contents; they are overwritten). `input` is needed only for
// grad_weight, `weight` only for grad_input.
using Conv2dBackwardKernel = void(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& input,
                                  const Tensor& weight, const Tensor& grad_output, const Conv2dGeometry& g);

DP_DECLARE_KERNEL(conv2d_forward_kernel, Conv2dForwardKernel);
DP_DECLARE_KERNEL(conv2d_backward_kernel, Conv2dBackwardKernel);

}  // namespace dp::backend

// The entries the ops call: the output's (grad_output's) device type picks the backend.
