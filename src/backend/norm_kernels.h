#pragma once
// The kernel interface of layer_norm and batch_norm: implemented by the CPU backend
// (src/backend/cpu/norm_kernels.cpp, src/backend/cpu/normalization.cpp) and the CUDA backend
// (src/backend/cuda/norm_pool.cu), called by src/ops/normalization*.cpp through the entries
// backend::layer_norm_kernel etc. below, which pick the backend from the input's device type. No
// autograd inside. Every tensor argument is contiguous and on x's device; the statistics (mean,
// rstd / invstd) are float64 whatever the input dtype, so the backward reads them at full
// precision. batch_norm's per-channel steps (the running-stat update and invstd) run where the
// statistics are (on CUDA: queued after them, no host round trip).
#include <cstdint>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// ---- layer norm: x viewed as [M, N], normalised over each row of N ----

// out = (x - mean) * rstd * w + b per row; writes mean[M] and rstd[M] (float64, biased variance).
// w, b: [N] or undefined (no affine / no bias).
using LayerNormKernel = void(const Tensor& x, const Tensor& w, const Tensor& b, int64_t M, int64_t N, double eps, const Tensor& out,
                             const Tensor& mean, const Tensor& rstd);
// Gradients of layer_norm given dy [M, N]: dx [M, N], dw [N], db [N]; any of them may be
// undefined (not wanted). w may be undefined (weight 1).
using LayerNormBackwardKernel = void(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w, int64_t M, int64_t N,
                                     const Tensor& dx, const Tensor& dw, const Tensor& db);

// ---- batch norm: x viewed as [B, C, L], statistics per channel over B * L values ----

// Per-channel mean and biased variance into float64 tensors mean[C], var[C].
using BatchNormStatsKernel = void(const Tensor& x, int64_t B, int64_t C, int64_t L, const Tensor& mean, const Tensor& var);
// out = (x - mean[c]) * invstd[c] * w[c] + b[c] (w, b may be undefined).
using BatchNormApplyKernel = void(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& b, int64_t B, int64_t C,
                                  int64_t L, const Tensor& out);
// Gradients given dy [B, C, L]. training: the statistics came from this batch (dx includes their
// derivative); else they were constants (running stats). dx, dw, db may be undefined.
using BatchNormBackwardKernel = void(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, bool training,
                                     int64_t B, int64_t C, int64_t L, const Tensor& dx, const Tensor& dw, const Tensor& db);

DP_DECLARE_KERNEL(layer_norm_kernel, LayerNormKernel);
DP_DECLARE_KERNEL(layer_norm_backward_kernel, LayerNormBackwardKernel);
DP_DECLARE_KERNEL(batch_norm_stats_kernel, BatchNormStatsKernel);
DP_DECLARE_KERNEL(batch_norm_apply_kernel, BatchNormApplyKernel);
DP_DECLARE_KERNEL(batch_norm_backward_kernel, BatchNormBackwardKernel);

// ---- batch norm's per-channel steps ----

// running[c] = (1 - momentum) * running[c] + momentum * stat[c] * factor, in place; running
// contiguous, any floating dtype; stat float64 [C] on running's device.
using BatchNormUpdateRunning = void(const Tensor& running, const Tensor& stat, double factor, double momentum);
// v[c] = zero ? 0 : 1 / sqrt(v[c] + eps), in place on a float64 [C] tensor.
using BatchNormInvstd = void(const Tensor& v, double eps, bool zero);

DP_DECLARE_KERNEL(batch_norm_update_running_kernel, BatchNormUpdateRunning);
DP_DECLARE_KERNEL(batch_norm_invstd_kernel, BatchNormInvstd);

}  // namespace dp::backend

// The entries the ops call: x's device type picks the backend.
