#pragma once
// ZeroRedundancyOptimizer (ZeRO stage 1): torch.distributed.optim.ZeroRedundancyOptimizer. Wraps any
// optim::Optimizer so that each rank keeps the optimizer state of its shard of the parameters only.
//
//   dp::nn::DistributedDataParallel ddp(model, group);
//   dp::optim::ZeroRedundancyOptimizer opt(ddp->parameters(), dp::optim::AdamOptions(1e-3), group);
//   ... loss.backward(); opt.step();    // this rank's shard steps, then every rank gets the new weights
//
//  - Partition: per parameter, balanced by element count with PyTorch's greedy rule (each group's
//    parameters sorted largest first, each given to the rank with the fewest elements so far; ties
//    to the lowest rank). Every rank computes the same partition; a parameter's state lives on its
//    owner only. The inner optimizer (SGD, Adam, AdamW, or any optim::Optimizer through a factory)
//    is built over this rank's shard, one group per wrapper group (empty groups included).
//  - step(): the wrapper's hyper-parameters (lr changed by a scheduler, set_lr, any option) are
//    copied into the inner optimizer's groups, the shard steps, and the updated parameters go from
//    their owners to every rank: one broadcast per owner and bucket (params walked in order, cut at
//    bucket_cap_mb), or one all-gather of flat per-rank byte buffers per bucket (ParamSync). The
//    step waits for them unless overlap_with(model) was called: then they are waited for at the
//    next forward, module by module, each just before the first module that holds its parameters.
//  - Every rank must call the constructor, step(), add_param_group(), consolidate_state_dict(),
//    load_state_dict(), save_sharded() and load_sharded() in the same order (they communicate). The
//    constructor and add_param_group() check that every rank passed the same parameter list (a
//    fingerprint of the groups' shapes and dtypes, one all-gather); a difference is a ValueError on
//    every rank naming the ranks and what they hold.
//  - Checkpoints: consolidate_state_dict(to) gathers every shard's state on rank `to`; there
//    state_dict() is the full state in the inner optimizer's own format (what an unsharded SGD /
//    Adam's state_dict() gives: dp::save writes it, an unsharded optimizer or a ZeRO of any world
//    size loads it). load_state_dict(full state) keeps this rank's shard. save_sharded(prefix) has
//    every rank write its own shard file (no gather) plus an index; load_sharded(prefix) on any
//    world size reads only the shard files that hold its new shard. Files are written atomically.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include "dp/distributed/process_group.h"
#include "dp/distributed/work.h"
#include "dp/nn/hooks.h"
#include "dp/nn/module.h"
#include "dp/optim/adam.h"
#include "dp/optim/optimizer.h"
#include "dp/optim/sgd.h"

namespace dp::distributed {

// Builds the inner optimizer over one rank's shard: the wrapper's groups (with their options set)
// restricted to the shard; some may be empty, never all.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::OptimizerParamGroup> groups)>;

// A factory for optimizer O (any optim::Optimizer constructible from (groups, defaults)).
template <typename O, typename Options>
OptimizerFactory optimizer_factory(const Options& defaults) {
  return [defaults](std::vector<optim::OptimizerParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<O>(std::move(groups), defaults);
  };
}

namespace detail {
template <typename Options>
struct optimizer_for {};
template <>
struct optimizer_for<optim::SGDOptions> {
  using type = optim::SGD;
};
template <>
struct optimizer_for<optim::AdamOptions> {
  using type = optim::Adam;
};
template <>
struct optimizer_for<optim::AdamWOptions> {
  using type = optim::AdamW;
};
}  // namespace detail

// How updated parameters travel from their owners to every rank.
enum class ParamSync {
  Broadcast,  // one broadcast per owner rank and bucket, straight into the parameters
  AllGather,  // one all-gather per bucket of flat per-rank byte buffers (host parameters only),
              // copied out into the parameters
};

struct ZeroRedundancyOptimizerOptions {
  // Parameters are synchronised in buckets of about this many bytes, in parameter order (the
  // overlap with the next forward waits bucket by bucket). 0: one bucket.
  double bucket_cap_mb = 4.0;
  ParamSync sync = ParamSync::Broadcast;
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  ZeroRedundancyOptimizer(std::vector<optim::OptimizerParamGroup> groups, OptimizerFactory factory, ProcessGroupPtr group,
                          ZeroRedundancyOptimizerOptions options = {});
  ZeroRedundancyOptimizer(std::vector<Tensor> params, OptimizerFactory factory, ProcessGroupPtr group, ZeroRedundancyOptimizerOptions options = {});
  // The optimizer of the options' type: SGDOptions -> SGD, AdamOptions -> Adam, AdamWOptions -> AdamW.
  template <typename Options, typename O = typename detail::optimizer_for<Options>::type>
  ZeroRedundancyOptimizer(std::vector<optim::OptimizerParamGroup> groups, const Options& defaults, ProcessGroupPtr group,
                          ZeroRedundancyOptimizerOptions options = {})
      : ZeroRedundancyOptimizer(std::move(groups), optimizer_factory<O>(defaults), std::move(group), options) {}
  template <typename Options, typename O = typename detail::optimizer_for<Options>::type>
  ZeroRedundancyOptimizer(std::vector<Tensor> params, const Options& defaults, ProcessGroupPtr group, ZeroRedundancyOptimizerOptions options = {})
      : ZeroRedundancyOptimizer(std::move(params), optimizer_factory<O>(defaults), std::move(group), options) {}
  ~ZeroRedundancyOptimizer() override;

  // Steps this rank's shard (the closure, if any, runs on every rank, once), then synchronises the
  // parameters (see above). Returns the closure's loss.
  Tensor step(LossClosure closure = nullptr) override;
  // Adds a group on every rank (collective); the old groups keep their owners. It ends an
  // overlap_with (the buckets change): call overlap_with again.
  void add_param_group(const optim::OptimizerParamGroup& group) override;

  // ---- checkpoints ----
  // Gathers every rank's shard state on rank `to` (collective).
  void consolidate_state_dict(int to = 0);
  // On the rank consolidate_state_dict(to) named, with no step(), load or add_param_group since:
  // the full state in the inner optimizer's format ("optimizer" = "SGD", ...). Elsewhere, or when
  // stale, a ValueError saying what to call.
  optim::OptimizerState state_dict() const override;
  // Takes a full state (an unsharded optimizer's, or a consolidated one of any world size) and keeps
  // this rank's shard. Collective: every rank checks its part, and if any rank fails every rank
  // throws the same error and nothing is changed anywhere.
  void load_state_dict(const optim::OptimizerState& state) override;
  // Every rank writes "<prefix>.<id>.shard-<r>-of-<W>.safetensors" (its shard's state with the
  // global parameter indices and its partition), then rank 0 writes "<prefix>.index.json" naming
  // them; the previous save's shards are removed after that. Collective; the directory must be one
  // every rank sees (a shared filesystem) for load_sharded.
  void save_sharded(const std::string& prefix);
  // Reads the index and the shard files holding this rank's new shard (any saved world size).
  // Collective, all-or-nothing as load_state_dict.
  void load_sharded(const std::string& prefix);

  // ---- overlap of the parameter sync with the next forward ----
  // From now on step() returns without waiting for the parameter sync; `model`'s modules wait, in
  // a forward pre-hook, for the buckets that hold their own parameters (parameters of the optimizer
  // that no module of `model` holds are waited for before the model's forward starts, and
  // everything is waited for when it ends). A module whose parameters are read without calling it
  // (its forward() called directly, skipping hooks) is detected at the first forward and waited
  // for before the model's forward from then on. Read the parameters outside a forward only after
  // wait_for_params().
  void overlap_with(nn::Module& model);
  // Waits for every parameter sync still in flight (no-op when none).
  void wait_for_params();

  // ---- introspection ----
  ProcessGroup& process_group() const { return *group_; }
  // The global parameter indices (numbered over groups in order, as state_dict does) each rank
  // owns, in the inner optimizer's order.
  const std::vector<std::vector<int64_t>>& partition() const { return partition_; }
  // The rank that owns global parameter `index`.
  int owner(int64_t index) const;
  // This rank's inner optimizer (null when its shard is empty).
  optim::Optimizer* local_optimizer() const { return inner_.get(); }
  // Bytes of the inner optimizer's state tensors on this rank (momentum buffers, moments, ...).
  int64_t local_state_bytes() const;
  // The inner optimizer's name ("SGD").
  const std::string& inner_name() const { return inner_name_; }
  const char* name() const override { return "ZeroRedundancyOptimizer"; }

 protected:
  void check_options(const optim::OptimizerOptions& options) const override;
  std::unique_ptr<optim::OptimizerParamState> load_param_state(const Tensor& param, size_t index,
                                                               const std::map<std::string, Tensor>& saved) const override;

 private:
  // One collective of the parameter sync: a broadcast from `owner` of its parameters in one chunk
  // of the parameter order, or (all-gather, owner -1) the whole chunk.
  struct Bucket {
    int owner = -1;
    std::vector<int64_t> params;  // global indices, in order
  };
  struct HookedModule;
  ZeroRedundancyOptimizer(std::unique_ptr<optim::Optimizer> probe, OptimizerFactory factory, ProcessGroupPtr group,
                          ZeroRedundancyOptimizerOptions options);
  void partition_parameters();
  void build_buckets();
  void check_same_parameters(const char* op);
  std::vector<optim::OptimizerParamGroup> local_groups() const;
  void sync_options_into(optim::Optimizer& inner) const;
  void launch_param_sync();
  void wait_bucket(size_t bucket);
  void wait_root_buckets();
  void drop_hooks();
  void load_shard(const optim::OptimizerState& state, const std::string& op);
  std::vector<Tensor> all_params() const;
  OrderedDict<std::string, Tensor> shard_state_global() const;

  OptimizerFactory factory_;
  ProcessGroupPtr group_;
  ZeroRedundancyOptimizerOptions options_;
  std::string inner_name_;
  std::unique_ptr<optim::Optimizer> inner_;
  std::vector<std::vector<int64_t>> partition_;  // rank -> global indices (inner order)
  std::vector<int> owner_;                       // global index -> rank
  std::vector<int64_t> local_index_;             // global index -> index in its owner's inner order
  bool initialized_ = false;
  int64_t steps_ = 0;

  // Parameter sync.
  std::vector<Bucket> buckets_;
  std::vector<int64_t> bucket_of_param_;             // global index -> bucket
  std::vector<WorkPtr> works_;                       // per bucket, null when done
  std::vector<std::vector<Tensor>> gather_buffers_;  // all-gather: per bucket, one flat buffer per rank
  std::unique_ptr<std::mutex> sync_mu_;              // works_ (hooks may run on several threads)
  bool pending_ = false;

  // Overlap.
  bool overlap_ = false;
  bool learning_ = false;  // the first step after overlap_with: which hooks fired?
  std::vector<nn::RemovableHandle> hooks_;
  std::vector<std::shared_ptr<HookedModule>> hooked_;
  std::vector<size_t> root_buckets_;  // waited for by the first module hook of a forward
  bool root_waited_ = true;

  // Consolidated state (rank `consolidated_to_` only).
  std::optional<optim::OptimizerState> consolidated_;
  int consolidated_to_ = -1;
  int64_t consolidated_at_ = -1;
};

// The full state (every parameter's, in the inner optimizer's format) of a checkpoint written by
// save_sharded: reads the index and every shard file. Not collective: for loading into an unsharded
// optimizer (`sgd.load_state_dict(dp::distributed::load_zero_shards("ckpt/optim"))`).
optim::OptimizerState load_zero_shards(const std::string& prefix);

}  // namespace dp::distributed

namespace dp::optim {
using distributed::OptimizerFactory;
using distributed::ParamSync;
using distributed::ZeroRedundancyOptimizer;
using distributed::ZeroRedundancyOptimizerOptions;
}  // namespace dp::optim
