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
#include "dp/core/tensor.h"

namespace dp::kernels {

// ---- the CPU backend's layer / batch norm (backend/norm_kernels.h, contracts there; the ops call
// kernels::layer_norm_kernel etc., which pick the backend) ----

void layer_norm_kernel_cpu(const Tensor& x, const Tensor& w, const Tensor& b, int64_t M, int64_t N, double eps, const Tensor& out, const Tensor& mean,
                           const Tensor& rstd);
void layer_norm_backward_kernel_cpu(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w, int64_t M, int64_t N,
                                    const Tensor& dx, const Tensor& dw, const Tensor& db);
// Two passes: the mean, then the squared deviations.
void batch_norm_stats_kernel_cpu(const Tensor& x, int64_t B, int64_t C, int64_t L, const Tensor& mean, const Tensor& var);
void batch_norm_apply_kernel_cpu(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& b, int64_t B, int64_t C,
                                 int64_t L, const Tensor& out);
void batch_norm_backward_kernel_cpu(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, bool training,
                                    int64_t B, int64_t C, int64_t L, const Tensor& dx, const Tensor& dw, const Tensor& db);

// ---- dropout ----

// Draws the keep mask from the Philox stream (seed, blocks first_block, first_block + 1, ...):
// element i (row-major) is kept when word i % 4 of block i / 4 is below keep * 2^32, keep < 1.
// Writes mask (bool) and out = x * (mask ? scale : 0); x, mask, out contiguous, same numel.
void dropout_forward_kernel(const Tensor& x, double keep, double scale, uint64_t seed, uint64_t first_block, const Tensor& mask, const Tensor& out);
// out = x * (mask ? scale : 0) element-wise (the backward, and the in-place variant's noise).
// x may be out. Any floating dtype.
void dropout_apply_kernel(const Tensor& x, const Tensor& mask, double scale, const Tensor& out);

}  // namespace dp::kernels
