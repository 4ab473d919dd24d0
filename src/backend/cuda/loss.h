#pragma once
// CUDA kernels of the loss ops (src/backend/cuda/loss.cu), called by src/ops/loss_*.cpp after their
// argument checks, with the CPU's formulas (see those files). Inputs are float32, float64, float16
// or bfloat16; the math and every sum run in float32 (float64 for float64 inputs).
//
// Reductions are deterministic: each block sums its elements in a fixed order and writes a partial
// sum, and one block adds the partials in order and writes the 0-dim result (and, for nll_loss /
// cross_entropy, the total weight Mean divides by), all on the device. Backward kernels read the
// incoming gradient from device memory (LossGrad), so no value crosses to the host and nothing
// waits. The forward of a loss whose input can be invalid (a target outside [0, C), a BCE input
// outside [0, 1]) raises a flag and waits for its stream before returning (cuda/index.h explains
// why), so the caller throws the CPU's error.
#include <cstdint>
#include "backend/loss_kernels.h"
#include "dp/core/tensor.h"

namespace dp::backend::cuda {

// The loss kernel interface's types (backend/loss_kernels.h): the accumulation dtype, the incoming
// gradient on the device, and the [N, C, S] view of a class loss's input.
using backend::ClassShape;
using backend::loss_acc_dtype;
using backend::LossGrad;

// ---- element-wise losses ----

using backend::PointwiseKind;

// x, t contiguous of one shape and dtype; w, pw undefined or broadcastable to x (any layout, x's
// dtype). reduced: out is 0-dim and gets scale * sum of the losses; else out (x-shaped,
// contiguous) gets each. Returns true (after waiting for the stream) when k is Bce and an input
// lies outside [0, 1] or is NaN.
bool pointwise_loss_forward_kernel(PointwiseKind k, const Tensor& out, bool reduced, double scale, const Tensor& x, const Tensor& t, const Tensor& w,
                                   const Tensor& pw);
// gi / gt (x-shaped, contiguous; either undefined when not needed) = G_i * w * d loss / d x (t).
void pointwise_loss_backward_kernel(PointwiseKind k, const Tensor& gi, const Tensor& gt, const LossGrad& g, const Tensor& x, const Tensor& t,
                                    const Tensor& w, const Tensor& pw);

// ---- class losses: the input seen as [N, C, S], contiguous ----

// Reduced results: out 0-dim = the sum of the per-sample losses, divided by the total weight of
// the non-ignored samples for Mean; total_weight (0-dim, loss_acc_dtype) gets that total. None:
// out (N * S elements, contiguous) gets each sample's loss (0 for ignored ones).

// target: N * S class indices (int64 or uint8), contiguous; w: [C] contiguous or undefined.
// Returns true (after waiting for the stream) when a target is outside [0, C) and not `ignore`.
bool nll_loss_forward_kernel(const Tensor& out, Reduction red, const Tensor& total_weight, const Tensor& x, const Tensor& target, const Tensor& w,
                             ClassShape cs, int64_t ignore);
// gi (x-shaped, contiguous) = -w[t] * G_i at each sample's target, 0 elsewhere.
void nll_loss_backward_kernel(const Tensor& gi, const LossGrad& g, const Tensor& target, const Tensor& w, ClassShape cs, int64_t ignore);

// cross_entropy with class-index targets and label smoothing eps; lse (N * S, loss_acc_dtype) gets
// each sample's log-sum-exp for the backward. Returns true as nll_loss_forward.
bool cross_entropy_index_forward_kernel(const Tensor& out, Reduction red, const Tensor& total_weight, const Tensor& lse, const Tensor& x,
                                        const Tensor& target, const Tensor& w, ClassShape cs, int64_t ignore, double eps);
void cross_entropy_index_backward_kernel(const Tensor& gi, const LossGrad& g, const Tensor& x, const Tensor& target, const Tensor& w,
                                         const Tensor& lse, ClassShape cs, int64_t ignore, double eps);

// cross_entropy with class probabilities tq (x's shape and dtype, contiguous). Reduced: out =
// scale * sum. lse and rs (N * S, loss_acc_dtype) get each sample's log-sum-exp and sum_c w_c q_c.
void cross_entropy_prob_forward_kernel(const Tensor& out, bool reduced, double scale, const Tensor& lse, const Tensor& rs, const Tensor& x,
                                       const Tensor& tq, const Tensor& w, ClassShape cs, double eps);
// gi / gt (either undefined when not needed).
void cross_entropy_prob_backward_kernel(const Tensor& gi, const Tensor& gt, const LossGrad& g, const Tensor& x, const Tensor& tq, const Tensor& w,
                                        const Tensor& lse, const Tensor& rs, ClassShape cs, double eps);

}  // namespace dp::backend::cuda
