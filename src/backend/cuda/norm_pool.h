#pragma once
// CUDA pooling, batch norm and layer norm kernels (src/backend/cuda/norm_pool.cu). Each has the name, the
// arguments and the contract of its kernel in backend/pool_kernels.h and backend/norm_kernels.h
// (registered in register_reduce_kernels.cpp): contiguous tensors on one CUDA device, float32,
// float64, float16 or bfloat16 data (the 16-bit types computed in float and rounded once on store;
// the CPU kernels take only the first two), statistics tensors (mean, var, rstd, invstd) float64
// [M] or [C]. Everything is queued on the current stream of the tensors' device;
// nothing waits. Reductions accumulate in float for float32 and 16-bit data (double for float64): per thread,
// then across the block (warp shuffles, then shared memory), then across blocks in a second
// kernel, so results do not depend on timing. Pooling backward passes gather per input element
// (see cuda/pool_windows.h): no atomics.
#include <cstdint>
#include <optional>
#include "backend/pool_kernels.h"
#include "dp/core/tensor.h"

namespace dp::backend::cuda {

using backend::Pool2dGeometry;

// How many blocks share one channel (or column tile) of `count` values in the two-level reductions:
// enough blocks over all `channels` to give each of `sms` multiprocessors four, but none with
// fewer than 1024 values (below that a block is mostly start-up), and at most 1024 (the partials
// stay small and the final combine short). Always >= 1.
inline int64_t reduction_splits(int64_t count, int64_t channels, int64_t sms) {
  const int64_t want = channels >= 4 * sms ? 1 : (4 * sms + channels - 1) / (channels > 0 ? channels : 1);
  const int64_t most = (count + 1023) / 1024;
  int64_t s = want < most ? want : most;
  if (s > 1024) s = 1024;
  return s < 1 ? 1 : s;
}

// ---- pooling (backend/cpu/pool_kernels.h) ----
void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dGeometry& g);
void max_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices, const Pool2dGeometry& g);
void avg_pool2d_kernel(const Tensor& out, const Tensor& input, const Pool2dGeometry& g, bool count_include_pad,
                       std::optional<int64_t> divisor_override);
void avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g, bool count_include_pad,
                                std::optional<int64_t> divisor_override);
void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& input, const Pool2dGeometry& g);
void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g);

// ---- layer norm (backend/cpu/norm_kernels.h) ----
void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, int64_t M, int64_t N, double eps, const Tensor& out, const Tensor& mean,
                       const Tensor& rstd);
void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w, int64_t M, int64_t N,
                                const Tensor& dx, const Tensor& dw, const Tensor& db);

// ---- batch norm (backend/cpu/norm_kernels.h) ----
void batch_norm_stats_kernel(const Tensor& x, int64_t B, int64_t C, int64_t L, const Tensor& mean, const Tensor& var);
void batch_norm_apply_kernel(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& b, int64_t B, int64_t C,
                             int64_t L, const Tensor& out);
void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, bool training,
                                int64_t B, int64_t C, int64_t L, const Tensor& dx, const Tensor& dw, const Tensor& db);

// The two host loops of src/ops/normalization_batch.cpp, on the device:
// v[c] = zero ? 0 : 1 / sqrt(v[c] + eps), in place on a float64 [C] tensor.
void batch_norm_invstd_kernel(const Tensor& v, double eps, bool zero);
// running[c] = (1 - momentum) * running[c] + momentum * stat[c] * factor; running contiguous, any
// floating dtype, stat float64 [C].
void batch_norm_update_running_kernel(const Tensor& running, const Tensor& stat, double factor, double momentum);

}  // namespace dp::backend::cuda
