#pragma once
// Loss functions (torch.nn.functional's), each one fused op: the forward is one pass over
// contiguous data computing the per-element losses and their reduction together, and the backward
// is one fused kernel too (no chain of small ops). Float32 and float64, CPU. All are differentiable
// w.r.t. `input`; mse_loss, l1_loss, binary_cross_entropy(_with_logits) and cross_entropy with
// class-probability targets also w.r.t. `target` (as in PyTorch). `weight` and `pos_weight` are
// constants: passing one that requires grad (with grad mode on) is an error, as in PyTorch.
// Backward formulas are differentiable again (create_graph), through dp ops.
//
// Mean and Sum give a 0-dim tensor; None gives the per-element (or per-sample) losses. The mean of
// an empty input is NaN, as in PyTorch.
#include <cstdint>
#include <vector>
#include "dp/core/reduction.h"
#include "dp/core/tensor.h"

namespace dp {

// "none", "mean", "sum" (PyTorch's spelling).
const char* reduction_name(Reduction r);

// -weight * (target * max(log(input), -100) + (1 - target) * max(log(1 - input), -100)).
// input and target have the same shape (different sizes are an error, as in PyTorch); every input
// element must lie in [0, 1] (else ValueError); weight broadcasts to input's shape.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {}, Reduction reduction = Reduction::Mean);

// binary_cross_entropy(sigmoid(input), target) computed stably from logits:
// weight * ((1 - target) * input + (1 + (pos_weight - 1) * target) * softplus(-input)).
// input and target have the same shape; weight and pos_weight broadcast to it (pos_weight is
// typically [C], one weight for the positives of each class along the last dim).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {}, const Tensor& pos_weight = {},
                                        Reduction reduction = Reduction::Mean);

// (input - target)^2 and |input - target|. input and target must have the same shape: PyTorch
// broadcasts different shapes with a warning ("this will likely lead to incorrect results"); here
// that is a ShapeError.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// Negative log likelihood of log-probabilities. input: [N, C], [C] (no batch; target 0-dim) or
// [N, C, d1, ...] (target [N, d1, ...]); target holds class indices (int64, or uint8 as PyTorch
// accepts). loss = -weight[t] * input[n, t, ...], 0 where t == ignore_index. Mean divides by the
// sum of weight[t] over the non-ignored targets (their count without weight): NaN when all are
// ignored. A target outside [0, C) (and not ignore_index) is an IndexError naming it and C.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {}, int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);

// log_softmax over the class dim (dim 1, or 0 for a [C] input) fused with nll_loss, with PyTorch's
// label smoothing: per sample (1 - ls) * nll + ls / C * sum_c weight[c] * (-log p_c), and the Mean
// divisor of nll_loss. If target has input's shape it holds class probabilities (floating, same
// dtype; ignore_index must be negative): loss = -sum_c weight[c] * q_c * log p_c with
// q = (1 - ls) * target + ls / C, and Mean divides by the number of samples (N * d1 * ...).
Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {}, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean, double label_smoothing = 0.0);

// The exact parts of a mean, for DataParallel's forward_loss (dp/parallel/parallel_loss.h).
// While a MeanLossRecorder exists on a thread, each loss above called there with Reduction::Mean
// computes its mean as sum / count and records the three tensors. `count` is what the mean divides
// by: the summed weights of the non-ignored targets (nll_loss, cross_entropy with class indices),
// the number of samples (class probabilities) or of elements (the others), a 0-dim tensor on the
// input's device (float32 for 16-bit inputs). A caller that gets one of those means back can then
// add the sums and the counts of several slices of a batch exactly: the per-token mean of padded
// sequences whose slices hold different numbers of real tokens. Recorders nest (the innermost
// records); a recorder belongs to its thread.
class MeanLossRecorder {
 public:
  struct Entry {
    Tensor mean;   // what the loss returned: sum / count (differentiable)
    Tensor sum;    // the loss with Reduction::Sum (differentiable)
    Tensor count;  // the mean's denominator (no autograd history)
  };
  MeanLossRecorder();
  ~MeanLossRecorder();
  MeanLossRecorder(const MeanLossRecorder&) = delete;
  MeanLossRecorder& operator=(const MeanLossRecorder&) = delete;
  // The entry whose mean is `loss` itself (the same tensor, not an equal one); nullptr if none.
  const Entry* find(const Tensor& loss) const;
  // This thread's innermost recorder; nullptr when there is none (the losses' fast path).
  static MeanLossRecorder* current();
  // The losses call this: records {sum / count, sum, count} and returns the mean.
  Tensor record(const Tensor& sum, const Tensor& count);

 private:
  std::vector<Entry> entries_;
  MeanLossRecorder* previous_;
};

}  // namespace dp
