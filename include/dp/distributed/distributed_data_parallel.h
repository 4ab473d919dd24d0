#pragma once
// DistributedDataParallel: one model per process (or per thread, in tests), gradients all-reduced
// between them during backward, so after backward() every rank holds the gradient of the whole
// global batch (PyTorch's torch.nn.parallel.DistributedDataParallel).
//
//   auto group = dp::distributed::init_process_group();            // RANK, WORLD_SIZE, MASTER_ADDR, ...
//   dp::nn::DistributedDataParallel<Net> ddp(net, group);          // checks the ranks agree, copies rank 0's weights
//   Tensor loss = ddp->forward_loss(criterion, target, input);     // this rank's rows; loss of the global batch
//   loss.backward();                                               // gradients reduced in buckets while backward runs
//   optimizer.step();                                              // identical on every rank
//
//  - Construction checks that every rank has the same parameters and buffers (names, shapes,
//    dtypes; a difference is a DistributedError naming the first one and the ranks) and copies rank
//    0's values to every rank. Buffers (BatchNorm statistics) are copied from rank 0 again before
//    each training forward (broadcast_buffers), without touching autograd's version counters; in
//    evaluation mode once, at the first forward after training, so evaluation runs no collective
//    per batch and ranks may evaluate different numbers of batches.
//  - forward(args...) runs the module; forward_loss(criterion, target, args...) also applies the
//    criterion and combines the loss over ranks exactly: every rank's summed loss and row count are
//    added up, so the gradient is that of the mean over the global batch even when ranks hold
//    different numbers of rows (a ragged last batch), not an average of averages. After a plain
//    forward, gradients are averaged over ranks (PyTorch's rule).
//  - Unused parameters need no flag (see dp/distributed/reducer.h): parameters a rank did not use
//    count as zeros there; a parameter no rank used keeps an undefined .grad.
//  - Gradient accumulation: `auto guard = ddp->no_sync();` (around forward+backward or backward
//    alone), or ddp->accumulate(k) to synchronise on every k-th backward only; will_sync() says
//    whether the next backward synchronises (step the optimizer after it).
//  - .grad tensors are views into the reducer's bucket buffers: zero_grad() (either form) works;
//    a gradient kept from an earlier step is overwritten by the next backward.
//  - Uneven inputs: `auto join = ddp->join();` ... `join.finish();` lets ranks run different numbers
//    of iterations (dp/distributed/join.h).
//  - Comm hooks (register_comm_hook): dp::distributed::comm_hooks::fp16_compress() and
//    bf16_compress() halve the bytes on the wire.
//  - Hybrid: the wrapped module may be a DataParallel over several CPU devices (M cores in each of
//    N processes): its forward_loss then splits this rank's rows over the devices too.
//  - state_dict() keys are the module's own ("fc.weight"); checkpoints with PyTorch's "module."
//    prefix load too. The .grad of each parameter must not be replaced by a tensor of another
//    layout between backward passes that synchronise (it is copied back into the bucket if it is).
// Every rank must call forward/forward_loss and backward in the same pattern: a rank that skips
// a backward leaves the others waiting (they fail with a CollectiveTimeout naming it).
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>
#include "dp/autograd/grad_mode.h"
#include "dp/distributed/comm_hooks.h"
#include "dp/distributed/join.h"
#include "dp/distributed/process_group.h"
#include "dp/distributed/reducer.h"
#include "dp/distributed/timeline.h"
#include "dp/nn/module.h"
#include "dp/nn/module_holder.h"
#include "dp/parallel/data_parallel.h"  // hybrid DDP: users wrap a DataParallel

namespace dp::distributed {

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool broadcast_buffers = true;
  // Unused: a criterion returning a mean Tensor that none of the library's losses recorded is
  // weighted by its target's element count (dp/parallel/parallel_loss.h), whatever the dim.
  int64_t dim = 0;
};

namespace detail {

// The type-independent half of DistributedDataParallel.
class DDPCore : public Joinable {
 public:
  DDPCore(const nn::ModulePtr& module, ProcessGroupPtr group, const DistributedDataParallelOptions& options);
  // Before every forward: a failed earlier backward is reported, inside a Join the round is
  // announced, buffers come from rank 0 (inside a Join: the highest rank still training).
  // `uses_loss`: forward_loss (its loss allreduce follows).
  void before_forward(bool uses_loss = false);
  // The model's outputs: a backward pass that reaches them runs the end-of-pass reduction.
  void mark_outputs(const std::vector<Tensor>& outputs);
  // This rank's loss part -> the global batch's loss (value on every rank: the global loss;
  // gradient: this rank's share), and the next backward sums instead of averaging.
  Tensor global_loss(const parallel::LossPart& local);
  Reducer& reducer() { return *reducer_; }
  const ProcessGroupPtr& group() const { return group_; }
  int64_t dim() const { return options_.dim; }

  // Joinable: payload [this iteration synchronises gradients, uses forward_loss, trains].
  ProcessGroup& join_process_group() override { return *group_; }
  size_t join_payload_size() const override { return 3; }
  void join_shadow(const JoinRound& round) override;
  void join_finish(bool is_last_joiner) override;

 private:
  void broadcast_buffers_from(int root);
  void check_same_model(const std::vector<std::string>& descriptions);
  nn::ModulePtr module_;
  ProcessGroupPtr group_;
  DistributedDataParallelOptions options_;
  std::vector<Tensor> buffers_;
  bool buffers_synced_ = false;  // rank 0's buffers are in place and no training forward ran since
  int round_active_ = 0;         // inside a Join: the ranks training in this iteration (else 0)
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace detail

// While alive, backward passes accumulate gradients locally (DistributedDataParallel::no_sync).
class NoSyncGuard {
 public:
  explicit NoSyncGuard(Reducer& r) : reducer_(&r) { reducer_->push_no_sync(); }
  ~NoSyncGuard() {
    if (reducer_) reducer_->pop_no_sync();
  }
  NoSyncGuard(NoSyncGuard&& o) noexcept : reducer_(o.reducer_) { o.reducer_ = nullptr; }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;

 private:
  Reducer* reducer_;
};

template <typename M>
class DistributedDataParallelImpl : public nn::Module {
 public:
  DistributedDataParallelImpl(std::shared_ptr<M> module, ProcessGroupPtr group, DistributedDataParallelOptions options = {})
      : nn::Module("DistributedDataParallel"), module_(register_module("module", checked(std::move(module)))) {
    set_transparent_names(true);
    core_ = std::make_unique<detail::DDPCore>(module_.ptr(), std::move(group), options);
  }
  DistributedDataParallelImpl(nn::ModuleHolder<M> module, ProcessGroupPtr group, DistributedDataParallelOptions options = {})
      : DistributedDataParallelImpl(module.ptr(), std::move(group), options) {}
  DistributedDataParallelImpl(const DistributedDataParallelImpl&) = delete;  // one reducer per model

  template <typename... Args>
  auto forward(Args&&... args) {
    timeline::Scope span("forward", "ddp");
    core_->before_forward();
    using R = std::decay_t<decltype(module_->forward(std::forward<Args>(args)...))>;
    if constexpr (std::is_void_v<R>) {
      nn::call(*module_, std::forward<Args>(args)...);  // module(args...): its hooks run, as in PyTorch
    } else {
      R out = nn::call(*module_, std::forward<Args>(args)...);
      if (GradMode::is_enabled()) {
        std::vector<Tensor> ts;
        auto collect = [&ts](const Tensor& t) { ts.push_back(t); };
        parallel::for_each_tensor(out, collect);
        core_->mark_outputs(ts);
      }
      return out;
    }
  }

  // The loss of the global batch (see above). With a DataParallel module, its forward_loss_part
  // splits this rank's rows over its devices.
  template <typename Criterion, typename Target, typename... Args>
  Tensor forward_loss(Criterion&& criterion, const Target& target, Args&&... args) {
    timeline::Scope span("forward and loss", "ddp");
    core_->before_forward(/*uses_loss=*/true);
    parallel::LossPart part;
    if constexpr (requires(M & m, Criterion & c, const Target& t, std::decay_t<Args>&... a) { m.forward_loss_part(c, t, a...); }) {
      part = module_->forward_loss_part(criterion, target, std::forward<Args>(args)...);
    } else {
      auto out = nn::call(*module_, std::forward<Args>(args)...);
      part = parallel::make_loss_part(criterion, out, target);
    }
    if (GradMode::is_enabled() && part.sum.defined()) core_->mark_outputs({part.sum});
    return core_->global_loss(part);
  }

  // Uneven inputs (dp/distributed/join.h): `auto join = ddp->join(); ...; join.finish();`
  Join join(JoinOptions options = {}) { return Join({core_.get()}, options); }
  // This model as a Joinable, for a Join over several objects.
  Joinable* joinable() { return core_.get(); }

  NoSyncGuard no_sync() { return NoSyncGuard(core_->reducer()); }
  void accumulate(int k) { core_->reducer().accumulate(k); }
  bool will_sync() const { return core_->reducer().will_sync(); }
  bool last_backward_synced() const { return core_->reducer().last_backward_synced(); }
  void register_comm_hook(CommHook hook) { core_->reducer().register_comm_hook(std::move(hook)); }
  ReducerStats reducer_stats() const { return core_->reducer().stats(); }
  std::vector<std::vector<size_t>> bucket_indices() const { return core_->reducer().bucket_indices(); }

  const std::shared_ptr<M>& module() const { return module_.ptr(); }
  ProcessGroup& process_group() const { return *core_->group(); }
  int rank() const { return core_->group()->rank(); }
  int world_size() const { return core_->group()->size(); }

 private:
  static std::shared_ptr<M> checked(std::shared_ptr<M> m) {
    DP_CHECK(m != nullptr, ValueError, "DistributedDataParallel: the module is null");
    return m;
  }
  nn::ModuleHolder<M> module_;
  std::unique_ptr<detail::DDPCore> core_;
};

}  // namespace dp::distributed

namespace dp::nn {

// The holder: DistributedDataParallel<Net> ddp(net, group); ddp(x); ddp->module().
template <typename M>
class DistributedDataParallel : public ModuleHolder<distributed::DistributedDataParallelImpl<M>> {
  using Base = ModuleHolder<distributed::DistributedDataParallelImpl<M>>;

 public:
  using Base::Base;
  DistributedDataParallel(std::nullptr_t) : Base(nullptr) {}         // NOLINT
  DistributedDataParallel(Base holder) : Base(std::move(holder)) {}  // NOLINT: register_module's return value
  DistributedDataParallel(std::shared_ptr<M> module, distributed::ProcessGroupPtr group, distributed::DistributedDataParallelOptions options = {})
      : Base(std::make_shared<distributed::DistributedDataParallelImpl<M>>(std::move(module), std::move(group), options)) {}
  DistributedDataParallel(ModuleHolder<M> module, distributed::ProcessGroupPtr group, distributed::DistributedDataParallelOptions options = {})
      : DistributedDataParallel(module.ptr(), std::move(group), options) {}
};

template <typename M>
DistributedDataParallel(std::shared_ptr<M>, distributed::ProcessGroupPtr) -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(std::shared_ptr<M>, distributed::ProcessGroupPtr, distributed::DistributedDataParallelOptions) -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(ModuleHolder<M>, distributed::ProcessGroupPtr) -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(ModuleHolder<M>, distributed::ProcessGroupPtr, distributed::DistributedDataParallelOptions) -> DistributedDataParallel<M>;

using distributed::DistributedDataParallelOptions;

}  // namespace dp::nn
