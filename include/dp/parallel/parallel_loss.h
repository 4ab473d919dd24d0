#pragma once
// The loss computed on the replicas (DataParallel::forward_loss): each replica's output meets its
// slice of the target on its own device, and only two scalars per replica travel to the output
// device, so that device never holds the whole output and its gradient (PyTorch users' "GPU 0 runs
// out of memory first").
//
// A criterion returns, per replica, a LossPart: the loss summed over the replica's slice and, for
// a mean, the mean's denominator for that slice. The full-batch loss is sum(sums) / sum(counts):
// exactly what the criterion gives on the whole batch, also for weighted or ignore_index means.
//  - dparallel's loss modules (BCELoss, BCEWithLogitsLoss, MSELoss, L1Loss, NLLLoss,
//    CrossEntropyLoss, as holders or shared_ptrs) are split this way automatically.
//  - Any other callable (output, target) -> LossPart is used as is.
//  - A callable returning a Tensor: while it runs, the library's mean losses (dp::cross_entropy,
//    F::cross_entropy, nll_loss, mse_loss, l1_loss, binary_cross_entropy(_with_logits), and the
//    loss modules called inside) record their sum and count (dp::MeanLossRecorder, dp/ops/loss.h).
//    If the callable returns exactly such a mean, its part is that {sum, count}: a per-token mean
//    with ignore_index over padded sequences is exact whatever the replicas' numbers of real tokens.
//    Any other tensor (a sum of two losses, a loss times a constant, your own mean) is taken to be a
//    mean over the target's elements (its first tensor's numel): its part is {loss * n, n}. When
//    neither holds, return a LossPart.
#include "dp/nn/modules/loss.h"

namespace dp::parallel {

// A criterion may return one itself: forward_loss(criterion, target, inputs...) with
//   [](const Tensor& out, const Tensor& y) -> dp::parallel::LossPart {
//     Tensor keep = y.ne(pad);
//     return {my_loss(out, y, Reduction::Sum), keep.sum().to(out.dtype())};
//   }
// gives sum(sums) / sum(counts) over the batch (count undefined in every replica: a summed loss).
struct LossPart {
  Tensor sum;    // the loss summed over this replica's slice (0-dim or one element)
  Tensor count;  // the mean's denominator for this slice; undefined for a summed loss
};

// The part of one replica for dparallel's loss modules (weights follow the output's device).
LossPart loss_part(const nn::BCELossImpl& loss, const Tensor& output, const Tensor& target);
LossPart loss_part(const nn::BCEWithLogitsLossImpl& loss, const Tensor& output, const Tensor& target);
LossPart loss_part(const nn::MSELossImpl& loss, const Tensor& output, const Tensor& target);
LossPart loss_part(const nn::L1LossImpl& loss, const Tensor& output, const Tensor& target);
LossPart loss_part(const nn::NLLLossImpl& loss, const Tensor& output, const Tensor& target);
LossPart loss_part(const nn::CrossEntropyLossImpl& loss, const Tensor& output, const Tensor& target);

// Combines the replicas' parts (gathered onto `destination`) into the full-batch loss.
Tensor combine_loss_parts(const std::vector<LossPart>& parts, Device destination);
// The batch's part: the sum of the sums and of the counts (undefined for a summed loss), on
// `destination`. DistributedDataParallel combines these parts across processes.
LossPart sum_loss_parts(const std::vector<LossPart>& parts, Device destination);

}  // namespace dp::parallel
