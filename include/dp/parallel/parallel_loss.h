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
//  - A callable returning a Tensor is taken to be a mean over its slice's rows (along dim): its
//    part is {loss * rows, rows}.
#include "dp/nn/modules/loss.h"

namespace dp::parallel {

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
