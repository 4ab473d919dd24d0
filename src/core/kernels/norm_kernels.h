#pragma once
// Fused CPU kernels of layer_norm and batch_norm (float32 / float64), used by
// src/ops/normalization*.cpp. No autograd inside. The layer / batch norm entries send CUDA tensors
// to src/cuda/norm_pool.cu (same contract). Every tensor argument is contiguous; the
// statistics (mean, rstd / invstd) are float64 whatever the input dtype, so the backward reads
// them at full precision. Large calls split rows (layer norm) or channels (batch norm) over a few
// threads, except on a device worker (DataParallel replicas already use the cores); the result
// does not depend on the split. The kernels keep no state, so concurrent calls on different
// tensors are safe.
#include <cstdint>
#include "dp/core/tensor.h"

namespace dp::kernels {

// ---- layer norm: x viewed as [M, N], normalised over each row of N ----

// out = (x - mean) * rstd * w + b per row; writes mean[M] and rstd[M] (float64, biased variance).
// w, b: [N] or undefined (no affine / no bias).
void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, int64_t M, int64_t N, double eps, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd);
// Gradients of layer_norm given dy [M, N]: dx [M, N], dw [N], db [N]; any of them may be
// undefined (not wanted). w may be undefined (weight 1).
void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w, int64_t M,
                                int64_t N, const Tensor& dx, const Tensor& dw, const Tensor& db);

// ---- batch norm: x viewed as [B, C, L], statistics per channel over B * L values ----

// Per-channel mean and biased variance (two passes) into float64 tensors mean[C], var[C].
void batch_norm_stats_kernel(const Tensor& x, int64_t B, int64_t C, int64_t L, const Tensor& mean, const Tensor& var);
// out = (x - mean[c]) * invstd[c] * w[c] + b[c] (w, b may be undefined).
void batch_norm_apply_kernel(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& b, int64_t B,
                             int64_t C, int64_t L, const Tensor& out);
// Gradients given dy [B, C, L]. training: the statistics came from this batch (dx includes their
// derivative); else they were constants (running stats). dx, dw, db may be undefined.
void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w,
                                bool training, int64_t B, int64_t C, int64_t L, const Tensor& dx, const Tensor& dw, const Tensor& db);

// ---- dropout ----

// Draws the keep mask from the Philox stream (seed, blocks first_block, first_block + 1, ...):
// element i (row-major) is kept when word i % 4 of block i / 4 is below keep * 2^32, keep < 1.
// Writes mask (bool) and out = x * (mask ? scale : 0); x, mask, out contiguous, same numel.
void dropout_forward_kernel(const Tensor& x, double keep, double scale, uint64_t seed, uint64_t first_block, const Tensor& mask,
                            const Tensor& out);
// out = x * (mask ? scale : 0) element-wise (the backward, and the in-place variant's noise).
// x may be out. Any floating dtype.
void dropout_apply_kernel(const Tensor& x, const Tensor& mask, double scale, const Tensor& out);

}  // namespace dp::kernels
