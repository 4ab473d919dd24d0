#pragma once
// The kernel interface of the loss ops: one signature per kernel, implemented by the CPU backend
// (src/backend/cpu/loss_*.cpp) and the CUDA backend (src/backend/cuda/loss.cu), called by src/ops/loss_*.cpp
// after their argument checks. All tensors are on the device the call names; the formulas are in
// the ops' files.
//
// Reduced results stay on the device: out 0-dim = the sum of the per-sample losses (divided by the
// total weight of the non-ignored samples for Mean, or times `scale`), and the total weight Mean
// divides by is written to a 0-dim tensor the backward reads back. Backward kernels read the
// incoming gradient from device memory (LossGrad), so no value has to cross to the host.
#include <cstdint>
#include "backend/kernel_stub.h"
#include "dp/core/reduction.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// The dtype loss sums are kept in (total weights, saved log-sum-exps): float64 for float64 inputs,
// else float32.
inline DType loss_acc_dtype(DType input) { return input == kFloat64 ? kFloat64 : kFloat32; }

// The incoming gradient of a loss: G_i = g[i] (per_sample: g contiguous, one value per loss
// element or sample) or g[0], times scale, divided by divisor[0] when divisor is defined (0-dim,
// loss_acc_dtype: the Mean total weight). g has the input's dtype.
struct LossGrad {
  Tensor g;
  bool per_sample = false;
  double scale = 1.0;
  Tensor divisor;
};

// A class loss's input seen as [N, C, S], contiguous.
struct ClassShape {
  int64_t n = 1, c = 1, s = 1;
};

// ---- element-wise losses: mse_loss, l1_loss, binary_cross_entropy(_with_logits) ----

enum class PointwiseKind { Mse, L1, Bce, BceLogits };

// The floor of x (1 - x) in the BCE gradient: PyTorch's EPSILON is the float 1e-12 (so in float64
// it is 9.99999996e-13). Every backend and the create_graph formula use it.
inline constexpr float kBceEps = 1e-12f;

// The op's name, for errors.
inline const char* pointwise_loss_name(PointwiseKind k) {
  switch (k) {
    case PointwiseKind::Mse:
      return "mse_loss";
    case PointwiseKind::L1:
      return "l1_loss";
    case PointwiseKind::Bce:
      return "binary_cross_entropy";
    case PointwiseKind::BceLogits:
      return "binary_cross_entropy_with_logits";
  }
  return "?";
}

// x, t contiguous of one shape and dtype; w, pw undefined or broadcastable to x (contiguous, x's
// dtype). reduced: out is 0-dim and gets scale * the sum of the losses (Mean: scale = 1 / numel,
// NaN for an empty input); else out (x-shaped, contiguous) gets each. Returns true when k is Bce
// and an input lies outside [0, 1] or is NaN (the caller throws).
using PointwiseLossForward = bool(PointwiseKind k, const Tensor& out, bool reduced, double scale, const Tensor& x, const Tensor& t, const Tensor& w,
                                  const Tensor& pw);
// gi / gt (x-shaped, contiguous; either undefined when not needed) = G_i * w * d loss / d x (t).
using PointwiseLossBackward = void(PointwiseKind k, const Tensor& gi, const Tensor& gt, const LossGrad& g, const Tensor& x, const Tensor& t,
                                   const Tensor& w, const Tensor& pw);

DP_DECLARE_KERNEL(pointwise_loss_forward_kernel, PointwiseLossForward);
DP_DECLARE_KERNEL(pointwise_loss_backward_kernel, PointwiseLossBackward);

// ---- nll_loss ----

// Class-index targets (N * S, int64 or uint8, contiguous), w [C] contiguous or undefined. out: 0-dim
// when red is Mean or Sum (total_weight, 0-dim loss_acc_dtype, gets the total weight of the
// non-ignored samples), else N * S contiguous per-sample losses (0 for ignored samples). Returns
// true when a target is outside [0, C) and not `ignore` (the caller throws the error naming it).
using NllLossForward = bool(const Tensor& out, Reduction red, const Tensor& total_weight, const Tensor& x, const Tensor& target, const Tensor& w,
                            ClassShape cs, int64_t ignore);
// gi (the input's shape, contiguous) = -w[t] * G_i at each sample's target, 0 elsewhere.
using NllLossBackward = void(const Tensor& gi, const LossGrad& g, const Tensor& target, const Tensor& w, ClassShape cs, int64_t ignore);

DP_DECLARE_KERNEL(nll_loss_forward_kernel, NllLossForward);
DP_DECLARE_KERNEL(nll_loss_backward_kernel, NllLossBackward);

// ---- cross_entropy ----

// Class-index targets (N * S, int64 or uint8, contiguous), label smoothing eps, w [C] contiguous or
// undefined. out: 0-dim when red is Mean or Sum (total_weight, 0-dim loss_acc_dtype, gets the
// total weight), else N * S contiguous per-sample losses (0 for ignored samples). lse (N * S,
// loss_acc_dtype) gets each sample's log-sum-exp for the backward. Returns true when a target is
// outside [0, C) and not `ignore` (the caller throws the error naming it).
using CrossEntropyIndexForward = bool(const Tensor& out, Reduction red, const Tensor& total_weight, const Tensor& lse, const Tensor& x,
                                      const Tensor& target, const Tensor& w, ClassShape cs, int64_t ignore, double eps);
// gi (x-shaped, contiguous) = G_i * (S_i * softmax(x) - coef), 0 for ignored samples.
using CrossEntropyIndexBackward = void(const Tensor& gi, const LossGrad& g, const Tensor& x, const Tensor& target, const Tensor& w, const Tensor& lse,
                                       ClassShape cs, int64_t ignore, double eps);
// Class probabilities tq (x's shape and dtype, contiguous). reduced: out (0-dim) = scale * the sum,
// else out (N * S) gets each sample's loss. lse and rs (N * S, loss_acc_dtype) get each sample's
// log-sum-exp and sum_c w_c q_c.
using CrossEntropyProbForward = void(const Tensor& out, bool reduced, double scale, const Tensor& lse, const Tensor& rs, const Tensor& x,
                                     const Tensor& tq, const Tensor& w, ClassShape cs, double eps);
// gi / gt (x-shaped, contiguous; either undefined when not needed).
using CrossEntropyProbBackward = void(const Tensor& gi, const Tensor& gt, const LossGrad& g, const Tensor& x, const Tensor& tq, const Tensor& w,
                                      const Tensor& lse, const Tensor& rs, ClassShape cs, double eps);

DP_DECLARE_KERNEL(cross_entropy_index_forward_kernel, CrossEntropyIndexForward);
DP_DECLARE_KERNEL(cross_entropy_index_backward_kernel, CrossEntropyIndexBackward);
DP_DECLARE_KERNEL(cross_entropy_prob_forward_kernel, CrossEntropyProbForward);
DP_DECLARE_KERNEL(cross_entropy_prob_backward_kernel, CrossEntropyProbBackward);

}  // namespace dp::backend
