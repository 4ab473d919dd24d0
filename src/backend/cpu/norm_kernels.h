#pragma once
// Fused CPU kernels of layer_norm and batch_norm (float32 / float64), the CPU backend of
// backend/norm_kernels.h (the contracts), and dropout's (backend/random_kernels.h). No autograd
// inside. Every tensor argument is contiguous; the statistics (mean, rstd / invstd) are float64
// whatever the input dtype, so the backward reads them at full precision. Large calls split rows
// (layer norm) or channels (batch norm) over a few threads, except on a device worker (DataParallel
// replicas already use the cores); the result does not depend on the split. The kernels keep no
// state, so concurrent calls on different tensors are safe.
#include <cstdint>
#include "backend/norm_kernels.h"
#include "backend/random_kernels.h"
#include "dp/core/tensor.h"

namespace dp::backend::cpu {

// ---- the CPU backend's layer / batch norm (backend/norm_kernels.h, contracts there; the ops call
// backend::layer_norm_kernel etc., which pick the backend) ----

LayerNormKernel layer_norm_kernel;
LayerNormBackwardKernel layer_norm_backward_kernel;
// Two passes: the mean, then the squared deviations.
BatchNormStatsKernel batch_norm_stats_kernel;
BatchNormApplyKernel batch_norm_apply_kernel;
BatchNormBackwardKernel batch_norm_backward_kernel;

// ---- dropout ----

// Draws the keep mask from the Philox stream (seed, blocks first_block, first_block + 1, ...):
// element i (row-major) is kept when word i % 4 of block i / 4 is below keep * 2^32, keep < 1.
// Writes mask (bool) and out = x * (mask ? scale : 0); x, mask, out contiguous, same numel.
DropoutForward dropout_forward_kernel;
// out = x * (mask ? scale : 0) element-wise (the backward, and the in-place variant's noise).
// x may be out. Any floating dtype.
DropoutApply dropout_apply_kernel;

}  // namespace dp::backend::cpu
