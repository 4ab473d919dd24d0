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
#include <type_traits>
#include <vector>
#include "dp/core/errors.h"
#include "dp/nn/modules/loss.h"
#include "dp/ops/factory.h"
#include "dp/ops/loss.h"
#include "dp/parallel/scatter_gather.h"

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

namespace detail {

template <typename T>
struct unwrap_module {
  using type = void;
};
template <typename M>
struct unwrap_module<std::shared_ptr<M>> {
  using type = M;
};
template <typename M>
struct unwrap_module<nn::ModuleHolder<M>> {
  using type = M;
};

template <typename C>
decltype(auto) criterion_ref(C& c) {
  if constexpr (!std::is_void_v<typename unwrap_module<std::decay_t<C>>::type>)
    return *c;
  else
    return (c);
}

}  // namespace detail

// One replica's loss part from any supported criterion, by the rules above (DataParallel's and
// DistributedDataParallel's forward_loss call it on each replica's output).
template <typename C, typename Out, typename Target>
LossPart make_loss_part(C& criterion, const Out& output, const Target& target) {
  auto& fn = detail::criterion_ref(criterion);
  using Fn = std::remove_reference_t<decltype(fn)>;
  if constexpr (requires(Fn & f, const Out& o, const Target& t) { loss_part(f, o, t); }) {
    return loss_part(fn, output, target);
  } else {
    using Result = std::decay_t<decltype(fn(output, target))>;
    if constexpr (std::is_same_v<Result, LossPart>) {
      return fn(output, target);
    } else {
      static_assert(std::is_same_v<Result, Tensor>, "forward_loss: the criterion must return a Tensor or a dp::parallel::LossPart");
      MeanLossRecorder recorder;  // the library's mean losses computed by the criterion record their parts
      Tensor mean = fn(output, target);
      if (const MeanLossRecorder::Entry* e = recorder.find(mean)) return {e->sum, e->count};
      // Any other tensor: a mean over the elements of the target (its first tensor).
      std::vector<Tensor> ts;
      auto collect = [&ts](const Tensor& t) { ts.push_back(t); };
      for_each_tensor(target, collect);
      DP_CHECK(!ts.empty(), ValueError,
               "forward_loss: the criterion returned a Tensor that is not one of the library's mean losses and the target holds no "
               "tensor, so the mean's count is unknown; return a LossPart from the criterion");
      DP_CHECK(mean.defined(), ValueError, "forward_loss: the criterion returned an undefined tensor");
      Tensor n = full({}, static_cast<double>(ts[0].numel()), TensorOptions().dtype(mean.dtype()).device(mean.device()));
      return {mean * n, n};
    }
  }
}

}  // namespace dp::parallel
