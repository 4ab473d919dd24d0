#pragma once
// The kernel interface of batch_norm's per-channel steps (src/ops/normalization_batch.cpp), run
// where the statistics are (CPU: src/backend/cpu/normalization.cpp; CUDA: src/cuda/norm_pool.cu,
// queued after the statistics, no host round trip). The fused statistics, apply and backward
// kernels are still kernels::batch_norm_*_kernel (core/kernels/norm_kernels.h).
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// running[c] = (1 - momentum) * running[c] + momentum * stat[c] * factor, in place; running
// contiguous, any floating dtype; stat float64 [C] on running's device.
using BatchNormUpdateRunning = void(const Tensor& running, const Tensor& stat, double factor, double momentum);
// v[c] = zero ? 0 : 1 / sqrt(v[c] + eps), in place on a float64 [C] tensor.
using BatchNormInvstd = void(const Tensor& v, double eps, bool zero);

DP_DECLARE_KERNEL(batch_norm_update_running, BatchNormUpdateRunning);
DP_DECLARE_KERNEL(batch_norm_invstd, BatchNormInvstd);

}  // namespace dp::backend
