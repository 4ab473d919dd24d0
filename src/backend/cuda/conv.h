#pragma once
// 2-D convolution on a CUDA device (src/backend/cuda/conv.cpp), the CUDA backend of
// backend/conv_kernels.h (registered in register_reduce_kernels.cpp): contiguous NCHW tensors of one
// dtype (float32, float64, float16 or bfloat16; the CPU kernels take the first two) on one device,
// fresh outputs that are overwritten. Work is queued on the current stream of the tensors' device.
// The 16-bit types convolve with float compute type and tensor-op math allowed (PyTorch's choice);
// their bias is added, and its gradient summed, by dp's element-wise and sum kernels (float math).
//
// Built on cuDNN's convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter /
// BackwardBias): the algorithm is picked by cudnnGet*Algorithm_v7 once per shape (cached), its
// workspace comes from the caching allocator, and float32 uses FMA math unless
// cudnn::set_allow_tf32(true). Without cuDNN at build time (DP_HAVE_CUDNN=0) these throw
// NotImplementedError saying so.
#include <cstdint>
#include <string>
#include "backend/conv_kernels.h"
#include "dp/core/tensor.h"

namespace dp::backend::cuda {

void conv2d_forward_kernel(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias, const backend::Conv2dGeometry& g);
void conv2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& input, const Tensor& weight,
                            const Tensor& grad_output, const backend::Conv2dGeometry& g);

// Images per cuDNN call: cuDNN indexes tensors with 32-bit ints, so a batch whose input or output
// has 2^31 elements or more is cut into chunks of this many images. 0 when even one image (or the
// weight) is too large.
int64_t conv_batch_chunk(const backend::Conv2dGeometry& g);

// "[N, C, H, W] * [OC, C/groups, KH, KW] stride [sh, sw] padding [ph, pw] dilation [dh, dw] groups G
// float32 cuda:0": the shapes and options a convolution error names.
std::string conv_description(const backend::Conv2dGeometry& g, DType dtype, Device device);

}  // namespace dp::backend::cuda
