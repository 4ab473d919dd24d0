#pragma once
// nn::SyncBatchNorm (torch.nn.SyncBatchNorm): batch normalisation whose training statistics are
// those of the whole batch spread over the ranks of a process group and/or the replicas of
// DataParallel, so its outputs, running statistics and gradients equal one BatchNorm over the
// concatenated batch.
//
//   auto group = dp::distributed::init_process_group();
//   auto model = dp::nn::Sequential(dp::nn::Conv2d(...), dp::nn::BatchNorm2d(16), ...);
//   dp::nn::convert_sync_batchnorm(model.ptr(), group);          // every BatchNorm now syncs
//   auto ddp = dp::distributed::DistributedDataParallel(model, group);
//
// Training forward (PyTorch's SyncBatchNorm function): each rank's per-channel sum, sum of
// squares and row count (float64) travel in ONE allgather of a packed [sum, sqsum, count] vector,
// so ranks with different batch sizes, and a rank with an empty batch (count 0, it only takes part
// in the collectives), are handled; the global mean and biased variance normalise, the running
// statistics are updated with the unbiased global variance. Backward: the per-channel sums of dy
// and dy*(x - mean) travel in ONE allreduce, then the input gradient is computed locally; the
// weight and bias gradients stay local (DDP reduces them). Every rank must run the same
// SyncBatchNorm layers in the same order.
//
// Under DataParallel (replicas on cpu:0..N-1 of one process, where PyTorch refuses), the replicas of
// one layer meet in an in-process rendezvous (shared by the replicas, which are copies of the
// layer), in forward and in backward: their statistics are summed, then one replica does the
// process group's collective (DataParallel inside DDP: statistics over every replica of every rank).
// A replica that fails before reaching the layer leaves the others waiting until the timeout
// (DP_DIST_TIMEOUT, 60 s), then they fail with a DistributedError saying how many arrived.
//
// No communication: eval mode with running statistics (or training with one rank and one replica:
// the plain BatchNorm path). Training outside DataParallel without a process group is a
// DistributedError naming the layer. State dict keys equal BatchNorm's (weight, bias,
// running_mean, running_var, num_batches_tracked): checkpoints move between the two.
// Input [N, C, *] (at least 2D), float32 or float64.
#include <memory>
#include <optional>
#include <string>
#include "dp/distributed/process_group.h"
#include "dp/nn/modules/batchnorm.h"

namespace dp::nn {

struct SyncBatchNormOptions : BatchNormOptions {
  SyncBatchNormOptions(int64_t num_features) : BatchNormOptions(num_features) {}  // NOLINT
  SyncBatchNormOptions(const BatchNormOptions& o) : BatchNormOptions(o) {}        // NOLINT
  SyncBatchNormOptions& eps(double e) {
    BatchNormOptions::eps(e);
    return *this;
  }
  SyncBatchNormOptions& momentum(std::optional<double> m) {
    BatchNormOptions::momentum(m);
    return *this;
  }
  SyncBatchNormOptions& affine(bool a) {
    BatchNormOptions::affine(a);
    return *this;
  }
  SyncBatchNormOptions& track_running_stats(bool t) {
    BatchNormOptions::track_running_stats(t);
    return *this;
  }
  // The ranks whose statistics combine (PyTorch's default is the WORLD group; here there is no
  // global group, so give the one init_process_group() returned, or a subgroup). Null: only the
  // replicas of DataParallel combine.
  SyncBatchNormOptions& process_group(distributed::ProcessGroupPtr g) {
    process_group_ = std::move(g);
    return *this;
  }
  using BatchNormOptions::eps;
  using BatchNormOptions::momentum;
  using BatchNormOptions::affine;
  using BatchNormOptions::track_running_stats;
  const distributed::ProcessGroupPtr& process_group() const { return process_group_; }

 private:
  distributed::ProcessGroupPtr process_group_;
};

namespace detail {
class SyncBatchNormRendezvous;
}

class SyncBatchNormImpl : public BatchNormImplBase {
 public:
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(SyncBatchNormOptions(num_features)) {}
  explicit SyncBatchNormImpl(const SyncBatchNormOptions& options);
  // Replicas and clones share the rendezvous of the layer they copy (that is how DataParallel's
  // replicas meet).
  SyncBatchNormImpl(const SyncBatchNormImpl&) = default;

  Tensor forward(const Tensor& input);
  const distributed::ProcessGroupPtr& process_group() const { return group_; }
  void set_process_group(distributed::ProcessGroupPtr group) { group_ = std::move(group); }

 protected:
  void check_input_dim(const Tensor& input) const override;

 private:
  distributed::ProcessGroupPtr group_;
  std::shared_ptr<detail::SyncBatchNormRendezvous> rendezvous_;
};
using SyncBatchNorm = ModuleHolder<SyncBatchNormImpl>;

// Replaces every BatchNorm1d/BatchNorm2d (any BatchNormImplBase that is not already a
// SyncBatchNorm) in the tree of `module` by a SyncBatchNorm with the same options, the same
// parameter and buffer tensors (shared, not copied) and the training flag, using `group`
// (PyTorch's torch.nn.SyncBatchNorm.convert_sync_batchnorm). The replacement is made in each
// parent's registry (a Sequential also calls the new layer); returns the new root when `module`
// itself is a BatchNorm, else `module`. A C++ member of a parent's class that holds the old layer
// (a BatchNorm2d field) cannot be re-pointed: that is a ValueError naming the layer, so a layer
// is never silently left unsynchronised; build such classes with SyncBatchNorm directly.
ModulePtr convert_sync_batchnorm(const ModulePtr& module, distributed::ProcessGroupPtr group = nullptr);

}  // namespace dp::nn
