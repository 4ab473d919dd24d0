#pragma once
// Normalisation layers as differentiable ops (torch.nn.functional.layer_norm / batch_norm).
// float32 and float64 inputs (batch_norm also bfloat16 on the CPU; float16/bfloat16 on CUDA
// devices); the forward and the backward are each one fused kernel (see
// src/backend/cpu/norm_kernels.h). Under create_graph the backward is written with dp ops so it
// can be differentiated again.
#include <cstdint>
#include "dp/core/tensor.h"

namespace dp {

// Normalises over the trailing dims given by normalized_shape (input sizes [*, *normalized_shape]):
// y = (x - mean) / sqrt(var + eps) * weight + bias, biased variance per row. weight and bias, when
// defined, have shape normalized_shape.
Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape, const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);

// Batch normalisation of input [N, C], [N, C, L] or [N, C, *] per channel C.
//  - training: normalises with the batch's mean and biased variance; when running_mean /
//    running_var are defined they are updated in place (on the very tensors given, their version
//    bumped): running = (1 - momentum) * running + momentum * batch_stat, using the unbiased
//    variance for running_var (PyTorch's formula). ValueError if a channel has a single value.
//  - eval (training = false): normalises with running_mean / running_var, which must be defined.
// weight / bias: [C] or undefined. Running buffers: [C] floating tensors (undefined = not tracked).
// A bfloat16 input on the CPU takes weight, bias, running_mean and running_var (those defined)
// either all bfloat16 or all float32 (PyTorch's CPU mixed precision), anything else is a
// DTypeError; the output and the input gradient are bfloat16, the weight and bias gradients have
// the weight's and bias's dtype, and the statistics are computed in float64 either way.
// Safe to call concurrently from several threads on different tensors.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight, const Tensor& bias, bool training,
                  double momentum = 0.1, double eps = 1e-5);

}  // namespace dp
