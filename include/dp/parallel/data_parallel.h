#pragma once
// DataParallel: a module that splits each batch over several devices, runs a replica of the
// wrapped module on each in parallel, and gathers the outputs; gradients come back into the
// original parameters as if one device had seen the whole batch.
//
//   auto model = std::make_shared<Model>(5, 2);
//   model->to("cpu:0");                                        // parameters on device_ids[0]
//   dp::nn::DataParallel<Model> net(model, {"cpu:0", "cpu:1"});
//   dp::Tensor out = net(input);                               // input [30,5] -> replicas see [15,5]
//   loss_fn(out, target).backward();                           // model's .grad = full-batch gradient
//
// It follows torch.nn.DataParallel (docs/data-parallel.md), with the project's decisions:
//  - device_ids: default every CUDA device; with none, DataParallel just calls the module (the
//    no-device path). CPU devices (cpu:0 ... cpu:N-1, each a worker thread) are used when listed.
//  - output_device: default device_ids[0]; may be any device, the host "cpu" included. With one
//    device it is honoured too (the output is moved there).
//  - dim: the dimension inputs are split along and outputs gathered along (negative counts from
//    the end). Splits follow torch.chunk unless a policy or explicit sizes say otherwise.
//  - in_dims / out_dims / target_dim (vmap's in_dims/out_dims): one dim per forward argument
//    (std::nullopt: not split) and per element of a returned tuple, for sequence models whose
//    arguments carry the batch on different dims ([T, B, *] input, [B] lengths, [L*D, B, H] h0).
//    A std::vector of non-tensors (lengths) in an argument with a dim is split with the batch.
//  - Every forward checks that the module's parameters and buffers are on device_ids[0].
//  - Replicas are built once and kept: each forward refreshes them (no copy of parameters between
//    CPU devices, buffers copied) and links their parameters to the originals for backward. Replica
//    0 shares the original's parameters and buffers (BatchNorm running statistics persist). If
//    you change plain (non-tensor) members of the module after the first forward, call
//    invalidate_replicas(); registered parameters, buffers and submodules are tracked.
//  - Arguments and outputs of any type: see dp/parallel/scatter_gather.h.
//  - M must be copy-constructible (replicas are copies): checked at compile time.
//  - An error in a replica is re-thrown with the replica, its device and the rows of the batch it
//    got ("in replica 1 on device cpu:1 (replica 1 of 2 got rows 15..29 of a batch of 30 split
//    along dim 0)"), its type kept (see parallel_apply.h).
//  - forward_loss(criterion, target, inputs...) computes the loss on the replicas and returns it
//    on output_device: only scalars travel (dp/parallel/parallel_loss.h).
//  - state_dict() and named_parameters() are the wrapped module's ("fc.weight"), also when the
//    wrapper is a child; load_state_dict() also takes PyTorch's "module."-prefixed keys.
//  - Hooks (dp/nn/hooks.h): the module and its replicas are called as module(args...), so hooks
//    registered on the module fire in every replica (once per device and forward, in the replica's
//    thread, with the replica and its slice); hooks on the DataParallel wrapper fire once per call,
//    forward hooks with the gathered output. See docs/data-parallel.md.
//  - Printing is PyTorch's: DataParallel(\n  (module): Model(...)\n).
//  - CUDA devices: each replica runs on its GPU's worker thread with the caller's current stream of
//    that device; changed parameters reach the replicas in one coalesced copy per device and step,
//    and gradients are summed onto device_ids[0] coalesced (NCCL across distinct GPUs, else copies
//    and a sum kernel). DP_CUDA_VIRTUAL_DEVICES=N (dp/cuda/cuda.h) runs all of it on one GPU.
// One forward at a time per DataParallel object (replicas are shared state).
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include "dp/nn/module.h"
#include "dp/ops/factory.h"
#include "dp/parallel/balance.h"
#include "dp/parallel/comm.h"
#include "dp/parallel/parallel_apply.h"
#include "dp/parallel/parallel_loss.h"
#include "dp/parallel/replicate.h"
#include "dp/parallel/scatter_gather.h"

namespace dp::parallel {

struct DataParallelOptions {
  DataParallelOptions() = default;
  explicit DataParallelOptions(std::vector<Device> device_ids) : device_ids_(std::move(device_ids)) {}

  DataParallelOptions& device_ids(std::vector<Device> ids) {
    device_ids_ = std::move(ids);
    return *this;
  }
  DataParallelOptions& output_device(Device d) {
    output_device_ = d;
    return *this;
  }
  DataParallelOptions& dim(int64_t d) {
    dim_ = d;
    return *this;
  }
  DataParallelOptions& split(SplitPolicy p) {
    split_ = p;
    return *this;
  }
  // Rows per device for every forward (must sum to the batch size).
  DataParallelOptions& chunk_sizes(std::vector<int64_t> sizes) {
    chunk_sizes_ = std::move(sizes);
    return *this;
  }
  // false: replicas are rebuilt at every forward, as PyTorch does (slower; for modules whose plain
  // members change between steps).
  DataParallelOptions& keep_replicas(bool on) {
    keep_replicas_ = on;
    return *this;
  }
  // Per-argument split dims, one per forward argument in order (vmap's in_dims): a dim applies to
  // every tensor inside that argument (tuples, vectors, DP_FIELDS structs included), std::nullopt
  // passes the argument whole to every replica (its tensors moved to the replica's device). With
  // in_dims, every split argument must hold the same batch, and a std::vector of non-tensors inside
  // a split argument (std::vector<int64_t> lengths) is split with the batch, one element per row;
  // without, such a vector is copied whole to every replica (PyTorch's rule for Python lists).
  //   DataParallelOptions().in_dims({1, 0, 1})   // forward(x [T, B, I], lengths [B], h0 [L, B, H])
  DataParallelOptions& in_dims(std::vector<std::optional<int64_t>> dims) {
    in_dims_ = std::move(dims);
    return *this;
  }
  // Per-output gather dims: one per element of a returned std::tuple / std::pair (applying to every
  // tensor of that element: an LSTM's (h_n, c_n) pair takes one), or one for any other output.
  // Vectors of non-tensors in the output are concatenated. Default: dim() for everything.
  DataParallelOptions& out_dims(std::vector<int64_t> dims) {
    out_dims_ = std::move(dims);
    return *this;
  }
  // forward_loss: the dim the target is split along (default: dim()).
  DataParallelOptions& target_dim(int64_t d) {
    target_dim_ = d;
    return *this;
  }

  const std::optional<std::vector<Device>>& device_ids() const { return device_ids_; }
  const std::optional<Device>& output_device() const { return output_device_; }
  int64_t dim() const { return dim_; }
  SplitPolicy split() const { return split_; }
  const std::vector<int64_t>& chunk_sizes() const { return chunk_sizes_; }
  bool keep_replicas() const { return keep_replicas_; }
  const std::optional<std::vector<std::optional<int64_t>>>& in_dims() const { return in_dims_; }
  const std::vector<int64_t>& out_dims() const { return out_dims_; }
  const std::optional<int64_t>& target_dim() const { return target_dim_; }

 private:
  std::optional<std::vector<Device>> device_ids_;
  std::optional<Device> output_device_;
  int64_t dim_ = 0;
  SplitPolicy split_ = SplitPolicy::Chunk;
  std::vector<int64_t> chunk_sizes_;
  bool keep_replicas_ = true;
  std::optional<std::vector<std::optional<int64_t>>> in_dims_;
  std::vector<int64_t> out_dims_;
  std::optional<int64_t> target_dim_;
};

namespace detail {

// The type-independent half of DataParallel: device lists, checks, replicas.
class DataParallelCore {
 public:
  DataParallelCore(const nn::ModulePtr& module, const DataParallelOptions& options);
  bool no_device() const { return device_ids_.empty(); }
  const std::vector<Device>& device_ids() const { return device_ids_; }
  Device output_device() const { return output_device_; }
  int64_t dim() const { return options_.dim(); }
  const SplitOptions& split() const { return split_; }
  // The split of a forward with `args` arguments (forward_loss: the target first, then the
  // arguments): split() with per-argument dims when in_dims or target_dim is set.
  SplitOptions split_for(size_t args, bool with_target) const;
  const DataParallelOptions& options() const { return options_; }
  // The location check of every forward.
  void check_location(const nn::ModulePtr& module);
  // Replicas on device_ids[0..count).
  std::vector<nn::ModulePtr> replicas(const nn::ModulePtr& module, size_t count);
  void invalidate();
  int replica_builds() const { return replicas_ ? replicas_->builds() : 0; }

 private:
  DataParallelOptions options_;
  std::vector<Device> device_ids_;
  Device output_device_;
  SplitOptions split_;
  std::unique_ptr<ReplicaSet> replicas_;
};

// The run DataParallel's forward, forward_loss and data_parallel share (data_parallel.py's
// forward): the location check, the scatter of `packed` along the core's dim, then
// run(module, slice, device) on device_ids[0] alone (the module itself), or on every replica at
// once, each in its device's worker thread with the caller's grad mode and autocast state
// (run_replicas); the first replica error is rethrown with which rows of the batch that replica
// got. Returns each device's result in device order; nothing when run returns void.
template <typename M, typename Packed, typename Run>
auto run_data_parallel(DataParallelCore& core, const std::shared_ptr<M>& module, const Packed& packed, Run&& run, const SplitOptions& split) {
  using R = std::invoke_result_t<Run&, M&, Packed&, Device>;
  core.check_location(module);
  std::vector<Packed> inputs;
  ScatterPlan plan;
  if constexpr (std::tuple_size_v<Packed> == 0)
    inputs.emplace_back();  // zero arguments: one run, on device_ids[0]
  else
    inputs = scatter_args(packed, split, &plan);
  const std::vector<Device> used(core.device_ids().begin(), core.device_ids().begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  if (core.device_ids().size() == 1) {
    if constexpr (std::is_void_v<R>)
      return run(*module, inputs[0], used[0]);
    else
      return std::vector<R>{run(*module, inputs[0], used[0])};
  }
  const std::vector<nn::ModulePtr> replicas = core.replicas(module, inputs.size());
  const std::vector<std::string> notes = plan.split ? describe_slices(plan.batch, plan.rows, plan.dim) : std::vector<std::string>{};
  const bool grad_enabled = GradMode::is_enabled();
  auto on_replica = [&](size_t i) -> R {
    AutoGradMode mode(grad_enabled);
    return run(static_cast<M&>(*replicas[i]), inputs[i], used[i]);
  };
  if constexpr (std::is_void_v<R>) {
    rethrow_first_replica_error(run_replicas(used, [&](size_t i) { on_replica(i); }), used, notes);
  } else {
    std::vector<std::optional<R>> results(inputs.size());
    rethrow_first_replica_error(run_replicas(used, [&](size_t i) { results[i].emplace(on_replica(i)); }), used, notes);
    std::vector<R> out;
    out.reserve(results.size());
    for (auto& r : results) out.push_back(std::move(*r));
    return out;
  }
}

// DataParallel's call of a module on one device's slice: module(args...) (nn::call, with its
// hooks), the output's tensors moved to that device as parallel_apply does.
template <typename M, typename Tuple>
auto call_on_slice(M& module, Tuple& slice, Device device) {
  using R = std::decay_t<decltype(std::apply([&](auto&... a) { return module.forward(a...); }, slice))>;
  if constexpr (std::is_void_v<R>) {
    std::apply([&](auto&... a) { nn::call(module, a...); }, slice);
  } else {
    R out = std::apply([&](auto&... a) -> R { return nn::call(module, a...); }, slice);
    move_tensors_to(out, device);
    return out;
  }
}

// The outputs of a run: on one device the module's output moved to output_device; from several,
// gathered there along dim (or out_dims).
template <typename R>
R finish_outputs(std::vector<R> outputs, const DataParallelCore& core) {
  if (core.device_ids().size() == 1) return move_output(std::move(outputs[0]), core.output_device());
  return gather_outputs(std::move(outputs), core.output_device(), core.dim(), core.options().out_dims());
}

}  // namespace detail

template <typename M>
class DataParallelImpl : public nn::Module {
  static_assert(detail::replicable<M>());  // M's copy constructor makes the replicas

 public:
  DataParallelImpl(std::shared_ptr<M> module, DataParallelOptions options = {})
      : nn::Module("DataParallel"), module_(register_module("module", checked(std::move(module)))), core_(module_.ptr(), options) {
    set_transparent_names(true);
    // As PyTorch: a single device gets the module moved there; several are checked for balance.
    if (core_.device_ids().size() == 1) module_->to(core_.device_ids()[0]);
    if (core_.device_ids().size() > 1) check_balance(core_.device_ids());
  }
  DataParallelImpl(std::shared_ptr<M> module, std::vector<Device> device_ids, std::optional<Device> output_device = std::nullopt, int64_t dim = 0)
      : DataParallelImpl(std::move(module), make_options(std::move(device_ids), output_device, dim)) {}
  DataParallelImpl(nn::ModuleHolder<M> module, DataParallelOptions options = {}) : DataParallelImpl(module.ptr(), std::move(options)) {}
  DataParallelImpl(nn::ModuleHolder<M> module, std::vector<Device> device_ids, std::optional<Device> output_device = std::nullopt, int64_t dim = 0)
      : DataParallelImpl(module.ptr(), std::move(device_ids), output_device, dim) {}
  // A copy (module clone) wraps the clone of the module with the same options and new replicas.
  DataParallelImpl(const DataParallelImpl& other) : nn::Module(other), module_(other.module_), core_(module_.ptr(), other.core_.options()) {}

  // Splits the arguments, runs the replicas in parallel and gathers their outputs.
  template <typename... Args>
  auto forward(Args&&... args) {
    using R = std::decay_t<decltype(std::declval<M&>().forward(std::declval<std::decay_t<Args>&>()...))>;
    if (core_.no_device()) return static_cast<R>(nn::call(*module_, std::forward<Args>(args)...));
    const std::tuple<std::decay_t<Args>...> packed(std::forward<Args>(args)...);
    auto run = [](M& m, std::tuple<std::decay_t<Args>...>& slice, Device d) { return detail::call_on_slice(m, slice, d); };
    const SplitOptions split = core_.split_for(sizeof...(Args), false);
    if constexpr (std::is_void_v<R>)
      detail::run_data_parallel(core_, module_.ptr(), packed, run, split);
    else
      return detail::finish_outputs(detail::run_data_parallel(core_, module_.ptr(), packed, run, split), core_);
  }

  // The loss computed on the replicas (see parallel_loss.h): `target` is split like the inputs,
  // criterion(output_i, target_i) runs on replica i's device, and the full-batch loss comes back
  // on output_device as a scalar.
  template <typename Criterion, typename Target, typename... Args>
  Tensor forward_loss(Criterion&& criterion, const Target& target, Args&&... args) {
    LossPart part = forward_loss_part(std::forward<Criterion>(criterion), target, std::forward<Args>(args)...);
    if (!part.count.defined()) return part.sum;
    return part.sum / part.count.to(part.sum.dtype());
  }
  // forward_loss's two scalars before the division: the loss summed over the batch and the mean's
  // denominator (undefined for a summed loss), on output_device. DistributedDataParallel adds these
  // up across processes, so a ragged batch still gets the full-batch mean.
  template <typename Criterion, typename Target, typename... Args>
  LossPart forward_loss_part(Criterion&& criterion, const Target& target, Args&&... args) {
    using Packed = std::tuple<Target, std::decay_t<Args>...>;
    auto run_one = [&](M& module, Packed& in, Device) -> LossPart {
      auto out = std::apply([&](auto& t, auto&... a) { return nn::call(module, a...); }, in);
      return make_loss_part(criterion, out, std::get<0>(in));
    };
    Packed packed(target, std::forward<Args>(args)...);
    if (core_.no_device()) return sum_loss_parts({run_one(*module_, packed, Device::cpu())}, loss_device(packed));
    return sum_loss_parts(detail::run_data_parallel(core_, module_.ptr(), packed, run_one, core_.split_for(sizeof...(Args), true)),
                          core_.output_device());
  }

  const std::shared_ptr<M>& module() const { return module_.ptr(); }
  // Empty on the no-device path.
  const std::vector<Device>& device_ids() const { return core_.device_ids(); }
  Device output_device() const { return core_.output_device(); }
  int64_t dim() const { return core_.dim(); }
  // Rebuilds the replicas at the next forward (after changing non-tensor members of the module).
  void invalidate_replicas() { core_.invalidate(); }
  // How many times replicas were built (a test and tuning hook).
  int replica_builds() const { return core_.replica_builds(); }

 private:
  static std::shared_ptr<M> checked(std::shared_ptr<M> m) {
    DP_CHECK(m != nullptr, ValueError, "DataParallel: the module is null");
    return m;
  }
  static DataParallelOptions make_options(std::vector<Device> ids, std::optional<Device> out, int64_t dim) {
    DataParallelOptions o(std::move(ids));
    if (out) o.output_device(*out);
    o.dim(dim);
    return o;
  }
  template <typename Packed>
  static Device loss_device(const Packed& packed) {
    Device d = Device::cpu();
    bool found = false;
    auto first = [&](const Tensor& t) {
      if (!found) d = t.device();
      found = true;
    };
    detail::Walk<std::tuple_element_t<0, Packed>>::tensors(std::get<0>(packed), first);
    return d;
  }

  nn::ModuleHolder<M> module_;
  detail::DataParallelCore core_;
};

// The functional form: one call, replicas made for it (no state kept), no module moved.
// With no device_ids, every CUDA device; with none, a ValueError (use the module directly).
template <typename M, typename... Args>
auto data_parallel(const std::shared_ptr<M>& module, const std::tuple<Args...>& inputs, std::optional<std::vector<Device>> device_ids = std::nullopt,
                   std::optional<Device> output_device = std::nullopt, int64_t dim = 0) {
  static_assert(detail::replicable<M>());
  DP_CHECK(module != nullptr, ValueError, "data_parallel: the module is null");
  module->template remember_type<M>();
  DataParallelOptions options;
  if (device_ids) options.device_ids(*device_ids);
  if (output_device) options.output_device(*output_device);
  options.dim(dim).keep_replicas(false);
  detail::DataParallelCore core(module, options);
  DP_CHECK(!core.no_device(), ValueError,
           "data_parallel: no device_ids given and no CUDA device is visible; pass device_ids (e.g. {\"cpu:0\", \"cpu:1\"}) or call the module");
  using R = std::decay_t<decltype(std::declval<M&>().forward(std::declval<Args&>()...))>;
  auto run = [](M& m, std::tuple<Args...>& slice, Device d) { return detail::call_on_slice(m, slice, d); };
  if constexpr (std::is_void_v<R>)
    detail::run_data_parallel(core, module, inputs, run, core.split());
  else
    return detail::finish_outputs(detail::run_data_parallel(core, module, inputs, run, core.split()), core);
}
// One tensor input (libtorch's signature).
template <typename M>
auto data_parallel(const std::shared_ptr<M>& module, const Tensor& input, std::optional<std::vector<Device>> device_ids = std::nullopt,
                   std::optional<Device> output_device = std::nullopt, int64_t dim = 0) {
  return data_parallel(module, std::tuple<Tensor>(input), std::move(device_ids), output_device, dim);
}

}  // namespace dp::parallel

namespace dp::nn {

// The holder: DataParallel<Model> net(model, {"cpu:0", "cpu:1"}); net(x); net->module().
template <typename M>
class DataParallel : public ModuleHolder<parallel::DataParallelImpl<M>> {
  using Base = ModuleHolder<parallel::DataParallelImpl<M>>;

 public:
  using Base::Base;
  DataParallel(std::nullptr_t) : Base(nullptr) {}         // NOLINT
  DataParallel(Base holder) : Base(std::move(holder)) {}  // NOLINT: register_module's return value
  DataParallel(std::shared_ptr<M> module, parallel::DataParallelOptions options = {})
      : Base(std::make_shared<parallel::DataParallelImpl<M>>(std::move(module), std::move(options))) {}
  DataParallel(std::shared_ptr<M> module, std::vector<Device> device_ids, std::optional<Device> output_device = std::nullopt, int64_t dim = 0)
      : Base(std::make_shared<parallel::DataParallelImpl<M>>(std::move(module), std::move(device_ids), output_device, dim)) {}
  DataParallel(ModuleHolder<M> module, parallel::DataParallelOptions options = {}) : DataParallel(module.ptr(), std::move(options)) {}
  DataParallel(ModuleHolder<M> module, std::vector<Device> device_ids, std::optional<Device> output_device = std::nullopt, int64_t dim = 0)
      : DataParallel(module.ptr(), std::move(device_ids), output_device, dim) {}
};

template <typename M>
DataParallel(std::shared_ptr<M>, std::vector<Device>) -> DataParallel<M>;
template <typename M>
DataParallel(std::shared_ptr<M>, parallel::DataParallelOptions) -> DataParallel<M>;
template <typename M>
DataParallel(ModuleHolder<M>, std::vector<Device>) -> DataParallel<M>;
template <typename M>
DataParallel(ModuleHolder<M>, parallel::DataParallelOptions) -> DataParallel<M>;

using parallel::DataParallelOptions;

}  // namespace dp::nn
