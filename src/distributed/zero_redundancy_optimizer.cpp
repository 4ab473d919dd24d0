// ZeroRedundancyOptimizer: partition, the inner optimizer over this rank's shard, step and the
// parameter sync (broadcast or all-gather, waited at once or at the next forward). Checkpoints are
// in zero_checkpoint.cpp.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <unordered_map>
#include "distributed/zero_internal.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/device_registry.h"
#include "dp/distributed/zero_redundancy_optimizer.h"
#include "dp/ops/factory.h"

namespace dp::distributed {

struct ZeroRedundancyOptimizer::HookedModule {
  std::vector<size_t> buckets;
  std::atomic<bool> fired{false};
};

namespace {

constexpr const char* kName = "ZeroRedundancyOptimizer";

std::vector<optim::OptimizerParamGroup> as_one_group(std::vector<Tensor> params) {
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(params));
  return groups;
}

// The inner optimizer over every parameter: checks them all with the inner optimizer's own rules
// (dtype, device, a parameter in two groups, hyper-parameters) on every rank alike, and gives the
// defaults and the name. Optimizers allocate their state at the first step, so this costs handles.
std::unique_ptr<optim::Optimizer> make_probe(const OptimizerFactory& factory, const std::vector<optim::OptimizerParamGroup>& groups,
                                             const ProcessGroupPtr& group) {
  DP_CHECK(factory != nullptr, ValueError, kName, ": the optimizer factory is empty");
  DP_CHECK(group != nullptr, ValueError, kName, ": the process group is null");
  std::unique_ptr<optim::Optimizer> probe;
  zero_detail::with_context(dp::detail::str(kName, ": "), [&] { probe = factory(groups); });
  DP_CHECK(probe != nullptr, ValueError, kName, ": the optimizer factory returned null");
  return probe;
}

}  // namespace

// ---------------------------------------------------------------- construction

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, OptimizerFactory factory, ProcessGroupPtr group,
                                                 ZeroRedundancyOptimizerOptions options)
    : ZeroRedundancyOptimizer(as_one_group(std::move(params)), std::move(factory), std::move(group), options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::OptimizerParamGroup> groups, OptimizerFactory factory, ProcessGroupPtr group,
                                                 ZeroRedundancyOptimizerOptions options)
    // The probe is made from the groups first; the factory and group are copied (not moved), as
    // the order in which the arguments are initialised is unspecified.
    : ZeroRedundancyOptimizer(make_probe(factory, groups, group), factory, group, options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::unique_ptr<optim::Optimizer> probe, OptimizerFactory factory, ProcessGroupPtr group,
                                                 ZeroRedundancyOptimizerOptions options)
    : Optimizer(probe->defaults().clone()),
      factory_(std::move(factory)),
      group_(std::move(group)),
      options_(options),
      inner_name_(probe->name()),
      sync_mu_(std::make_unique<std::mutex>()) {
  DP_CHECK(options_.bucket_cap_mb >= 0, ValueError, kName, ": bucket_cap_mb must be >= 0, got ", options_.bucket_cap_mb);
  // The probe checked and completed every group (options inherited from the defaults).
  std::vector<optim::OptimizerParamGroup> checked = probe->param_groups();
  init_groups(std::move(checked));
  for (const Tensor& p : all_params()) {
    try {
      check_device(p.device());
    } catch (Error& e) {
      e.add_context(dp::detail::str(kName, ": a parameter of shape ", p.size_str(), " is on ", p.device().str(), ", not a device of this process: "));
      throw;
    }
    DP_CHECK(options_.sync != ParamSync::AllGather || p.is_cpu(), DeviceError, kName,
             ": ParamSync::AllGather needs parameters in host memory; one of shape ", p.size_str(), " is on ", p.device().str(),
             " (use ParamSync::Broadcast)");
  }
  check_same_parameters("constructor");
  partition_parameters();
  if (!partition_[static_cast<size_t>(group_->rank())].empty()) inner_ = factory_(local_groups());
  build_buckets();
  initialized_ = true;
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  drop_hooks();
  try {
    wait_for_params();
  } catch (...) {  // a destructor does not throw; the group has reported its failure already
  }
}

std::vector<Tensor> ZeroRedundancyOptimizer::all_params() const { return parameters(); }

void ZeroRedundancyOptimizer::check_options(const optim::OptimizerOptions&) const {
  // The inner optimizer checks the hyper-parameters (the probe at construction, the factory's
  // optimizer in add_param_group, the inner optimizer in load_state_dict).
}

std::unique_ptr<optim::OptimizerParamState> ZeroRedundancyOptimizer::load_param_state(const Tensor&, size_t,
                                                                                      const std::map<std::string, Tensor>&) const {
  throw NotImplementedError("ZeroRedundancyOptimizer: per-parameter state lives in the inner optimizer");
}

// Every rank must hold the same parameter list: an all-gather of a fingerprint (groups, shapes,
// dtypes) and of counts that say what differs.
void ZeroRedundancyOptimizer::check_same_parameters(const char* op) {
  zero_detail::Fingerprint fp = zero_detail::fingerprint(*this);
  const int world = group_->size();
  if (world == 1) return;
  Tensor mine = empty({4}, kInt64);  // host tensors: written and read on the host
  int64_t* m = mine.data_ptr<int64_t>();
  m[0] = static_cast<int64_t>(fp.hash);
  m[1] = fp.groups;
  m[2] = fp.params;
  m[3] = fp.elements;
  std::vector<Tensor> all;
  for (int r = 0; r < world; ++r) all.push_back(empty({4}, kInt64));
  group_->allgather(all, mine)->wait();
  std::vector<int> differ;
  for (int r = 0; r < world; ++r)
    if (all[static_cast<size_t>(r)].data_ptr<int64_t>()[0] != all[0].data_ptr<int64_t>()[0]) differ.push_back(r);
  if (differ.empty()) return;
  std::string what;
  for (int r = 0; r < world; ++r) {
    const int64_t* v = all[static_cast<size_t>(r)].data_ptr<int64_t>();
    what += dp::detail::str(r == 0 ? "" : "; ", "rank ", r, ": ", v[1], " groups, ", v[2], " parameters, ", v[3], " elements, fingerprint ",
                            zero_detail::hex(static_cast<uint64_t>(v[0])));
  }
  std::string ranks;
  for (int r : differ) ranks += dp::detail::str(ranks.empty() ? "" : ", ", r);
  throw ValueError(dp::detail::str(kName, " ", op, ": the ranks passed different parameter lists (ranks ", ranks,
                                   " differ from rank 0 in the groups' parameter shapes or dtypes): ", what,
                                   ". Every rank must pass the same parameters, in the same groups and order"));
}

// PyTorch's greedy partition: each group's parameters sorted by element count (largest first,
// stable), each to the rank with the fewest elements so far (the lowest such rank).
void ZeroRedundancyOptimizer::partition_parameters() {
  const int world = group_->size();
  partition_.assign(static_cast<size_t>(world), {});
  std::vector<int64_t> sizes(static_cast<size_t>(world), 0);
  owner_.clear();
  local_index_.clear();
  int64_t base = 0;
  for (const auto& g : param_groups_) {
    const auto& params = g.params();
    std::vector<int64_t> order(params.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return params[static_cast<size_t>(a)].numel() > params[static_cast<size_t>(b)].numel(); });
    owner_.resize(owner_.size() + params.size());
    local_index_.resize(owner_.size());
    for (int64_t i : order) {
      const size_t r = static_cast<size_t>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
      const int64_t global = base + i;
      owner_[static_cast<size_t>(global)] = static_cast<int>(r);
      local_index_[static_cast<size_t>(global)] = static_cast<int64_t>(partition_[r].size());
      partition_[r].push_back(global);
      sizes[r] += params[static_cast<size_t>(i)].numel();
    }
    base += static_cast<int64_t>(params.size());
  }
}

int ZeroRedundancyOptimizer::owner(int64_t index) const {
  DP_CHECK(index >= 0 && index < static_cast<int64_t>(owner_.size()), IndexError, kName, ": parameter index ", index, " out of range (",
           owner_.size(), " parameters)");
  return owner_[static_cast<size_t>(index)];
}

// This rank's shard as groups of the wrapper's shape (one per wrapper group, possibly empty).
std::vector<optim::OptimizerParamGroup> ZeroRedundancyOptimizer::local_groups() const {
  const std::vector<Tensor> params = all_params();
  std::vector<int64_t> group_of;
  for (size_t gi = 0; gi < param_groups_.size(); ++gi) group_of.insert(group_of.end(), param_groups_[gi].params().size(), static_cast<int64_t>(gi));
  std::vector<std::vector<Tensor>> per_group(param_groups_.size());
  for (int64_t global : partition_[static_cast<size_t>(group_->rank())])
    per_group[static_cast<size_t>(group_of[static_cast<size_t>(global)])].push_back(params[static_cast<size_t>(global)]);
  std::vector<optim::OptimizerParamGroup> out;
  for (size_t gi = 0; gi < param_groups_.size(); ++gi) out.emplace_back(std::move(per_group[gi]), param_groups_[gi].options().clone());
  return out;
}

void ZeroRedundancyOptimizer::sync_options_into(optim::Optimizer& inner) const {
  auto& groups = inner.param_groups();
  DP_CHECK(groups.size() == param_groups_.size(), ValueError, kName, ": the inner ", inner_name_, " has ", groups.size(),
           " parameter groups, the wrapper ", param_groups_.size(), " (add groups through the ZeroRedundancyOptimizer, not its inner optimizer)");
  for (size_t gi = 0; gi < groups.size(); ++gi) groups[gi].set_options(param_groups_[gi].options().clone());
}

// ---------------------------------------------------------------- add_param_group

void ZeroRedundancyOptimizer::add_param_group(const optim::OptimizerParamGroup& group) {
  if (!initialized_) {  // init_groups during construction: the probe checked the groups
    Optimizer::add_param_group(group);
    return;
  }
  wait_for_params();
  make_probe(factory_, {group}, group_);  // the inner optimizer's checks of the new group
  try {
    Optimizer::add_param_group(group);  // a parameter already in another group, ...
  } catch (Error& e) {
    e.add_context(dp::detail::str(kName, ".add_param_group: "));
    throw;
  }
  try {
    check_same_parameters("add_param_group");
  } catch (...) {
    param_groups_.pop_back();
    throw;
  }
  partition_parameters();  // the old groups keep their owners: the partition goes group by group
  std::vector<optim::OptimizerParamGroup> local = local_groups();
  if (inner_) {
    inner_->add_param_group(local.back());
  } else if (!partition_[static_cast<size_t>(group_->rank())].empty()) {
    inner_ = factory_(std::move(local));
  }
  build_buckets();
  if (overlap_) {
    drop_hooks();
    overlap_ = false;  // the hooks name buckets of the old layout: call overlap_with again
  }
  consolidated_.reset();
  consolidated_to_ = -1;
}

// ---------------------------------------------------------------- step and the parameter sync

Tensor ZeroRedundancyOptimizer::step(LossClosure closure) {
  wait_for_params();
  if (learning_) {
    // The first step after overlap_with: a module whose hook did not fire during the forward is
    // used without being called; its parameters are waited for at the start of each forward.
    learning_ = false;
    bool any = false;
    for (const auto& h : hooked_) any = any || h->fired.load();
    if (!any) {  // the model's modules are never called through hooks: wait at the step instead
      drop_hooks();
      overlap_ = false;
    } else {
      for (const auto& h : hooked_)
        if (!h->fired.load()) root_buckets_.insert(root_buckets_.end(), h->buckets.begin(), h->buckets.end());
      std::sort(root_buckets_.begin(), root_buckets_.end());
      root_buckets_.erase(std::unique(root_buckets_.begin(), root_buckets_.end()), root_buckets_.end());
    }
  }
  Tensor loss;
  if (inner_) {
    sync_options_into(*inner_);
    loss = inner_->step(closure);
  } else {
    loss = run_closure(closure);
  }
  ++steps_;
  launch_param_sync();
  if (!overlap_) wait_for_params();
  return loss;
}

// Buckets: the parameters in global order, cut into chunks of about bucket_cap_mb bytes; within a
// chunk one broadcast per owner (Broadcast) or one all-gather (AllGather).
void ZeroRedundancyOptimizer::build_buckets() {
  buckets_.clear();
  gather_buffers_.clear();
  const std::vector<Tensor> params = all_params();
  bucket_of_param_.assign(params.size(), -1);
  works_.clear();
  const int world = group_->size();
  const int64_t cap = options_.bucket_cap_mb <= 0 ? INT64_MAX : static_cast<int64_t>(options_.bucket_cap_mb * 1024.0 * 1024.0);
  size_t begin = 0;
  while (begin < params.size()) {
    size_t end = begin;
    int64_t bytes = 0;
    while (end < params.size() && (end == begin || bytes + static_cast<int64_t>(params[end].nbytes()) <= cap))
      bytes += static_cast<int64_t>(params[end++].nbytes());
    if (options_.sync == ParamSync::Broadcast) {
      for (int r = 0; r < world; ++r) {
        Bucket b;
        b.owner = r;
        for (size_t i = begin; i < end; ++i)
          if (owner_[i] == r) b.params.push_back(static_cast<int64_t>(i));
        if (b.params.empty()) continue;
        for (int64_t i : b.params) bucket_of_param_[static_cast<size_t>(i)] = static_cast<int64_t>(buckets_.size());
        buckets_.push_back(std::move(b));
      }
    } else {
      Bucket b;
      std::vector<int64_t> per_rank(static_cast<size_t>(world), 0);
      for (size_t i = begin; i < end; ++i) {
        b.params.push_back(static_cast<int64_t>(i));
        per_rank[static_cast<size_t>(owner_[i])] += static_cast<int64_t>(params[i].nbytes());
        bucket_of_param_[i] = static_cast<int64_t>(buckets_.size());
      }
      const int64_t widest = std::max<int64_t>(1, *std::max_element(per_rank.begin(), per_rank.end()));
      std::vector<Tensor> buffers;
      for (int r = 0; r < world; ++r) buffers.push_back(zeros({widest}, kUInt8));
      gather_buffers_.push_back(std::move(buffers));
      buckets_.push_back(std::move(b));
    }
    begin = end;
  }
  works_.resize(buckets_.size());
}

void ZeroRedundancyOptimizer::launch_param_sync() {
  const int world = group_->size();
  if (world == 1) return;
  const int rank = group_->rank();
  const std::vector<Tensor> params = all_params();
  std::lock_guard<std::mutex> lock(*sync_mu_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (options_.sync == ParamSync::Broadcast) {
      std::vector<Tensor> tensors;
      tensors.reserve(bucket.params.size());
      for (int64_t i : bucket.params) tensors.push_back(params[static_cast<size_t>(i)]);
      works_[b] = group_->broadcast(std::move(tensors), bucket.owner);
      continue;
    }
    // All-gather: this rank's parameters of the chunk, packed in order into its buffer; the
    // others' unpacked from theirs when the work completes (on the group's thread). Byte copies on
    // the host: AllGather requires host parameters (checked at construction), and the buffers are
    // host tensors.
    std::vector<Tensor>& buffers = gather_buffers_[b];
    auto* mine = static_cast<uint8_t*>(buffers[static_cast<size_t>(rank)].data_ptr());
    size_t offset = 0;
    std::vector<std::vector<Tensor>> targets(static_cast<size_t>(world));
    for (int64_t i : bucket.params) {
      const Tensor& p = params[static_cast<size_t>(i)];
      const int r = owner_[static_cast<size_t>(i)];
      if (r == rank) {
        const Tensor src = p.is_contiguous() ? p : p.contiguous();
        std::memcpy(mine + offset, src.data_ptr(), src.nbytes());
        offset += src.nbytes();
      } else {
        targets[static_cast<size_t>(r)].push_back(p);
      }
    }
    WorkPtr work = group_->allgather(buffers, buffers[static_cast<size_t>(rank)]);
    work->then([buffers, targets = std::move(targets)] {
      for (size_t r = 0; r < targets.size(); ++r) {
        const auto* src = static_cast<const uint8_t*>(buffers[r].data_ptr());
        size_t at = 0;
        for (const Tensor& p : targets[r]) {
          if (p.is_contiguous()) {
            std::memcpy(p.data_ptr(), src + at, p.nbytes());
          } else {
            Tensor tmp = empty(p.sizes(), TensorOptions(p.dtype()));
            std::memcpy(tmp.data_ptr(), src + at, p.nbytes());
            NoGradGuard no_grad;
            Tensor target = p;
            target.copy_(tmp);
          }
          at += p.nbytes();
        }
      }
    });
    works_[b] = std::move(work);
  }
  pending_ = true;
  root_waited_ = false;
}

void ZeroRedundancyOptimizer::wait_bucket(size_t bucket) {
  std::lock_guard<std::mutex> lock(*sync_mu_);
  if (!pending_ || bucket >= works_.size() || !works_[bucket]) return;
  WorkPtr work = std::move(works_[bucket]);
  work->wait();
}

void ZeroRedundancyOptimizer::wait_root_buckets() {
  {
    std::lock_guard<std::mutex> lock(*sync_mu_);
    if (root_waited_) return;
    root_waited_ = true;
  }
  for (size_t b : root_buckets_) wait_bucket(b);
}

void ZeroRedundancyOptimizer::wait_for_params() {
  std::lock_guard<std::mutex> lock(*sync_mu_);
  if (!pending_) return;
  pending_ = false;
  root_waited_ = true;
  std::exception_ptr first;
  for (WorkPtr& w : works_) {
    if (!w) continue;
    WorkPtr work = std::move(w);
    try {
      work->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

// ---------------------------------------------------------------- overlap with the next forward

void ZeroRedundancyOptimizer::drop_hooks() {
  for (auto& h : hooks_) h.remove();
  hooks_.clear();
  hooked_.clear();
  root_buckets_.clear();
}

void ZeroRedundancyOptimizer::overlap_with(nn::Module& model) {
  wait_for_params();
  drop_hooks();
  std::unordered_map<const TensorImpl*, int64_t> index;
  const std::vector<Tensor> params = all_params();
  for (size_t i = 0; i < params.size(); ++i) index.emplace(params[i].unsafe_impl(), static_cast<int64_t>(i));
  std::vector<bool> held(params.size(), false);
  std::vector<std::pair<nn::ModulePtr, std::shared_ptr<HookedModule>>> plan;
  for (const nn::ModulePtr& m : model.modules(/*include_self=*/true)) {
    auto h = std::make_shared<HookedModule>();
    for (const Tensor& p : m->parameters(/*recurse=*/false)) {
      auto it = index.find(p.unsafe_impl());
      if (it == index.end()) continue;
      held[static_cast<size_t>(it->second)] = true;
      h->buckets.push_back(static_cast<size_t>(bucket_of_param_[static_cast<size_t>(it->second)]));
    }
    if (h->buckets.empty()) continue;
    std::sort(h->buckets.begin(), h->buckets.end());
    h->buckets.erase(std::unique(h->buckets.begin(), h->buckets.end()), h->buckets.end());
    plan.emplace_back(m, std::move(h));
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (!held[i]) root_buckets_.push_back(static_cast<size_t>(bucket_of_param_[i]));
  std::sort(root_buckets_.begin(), root_buckets_.end());
  root_buckets_.erase(std::unique(root_buckets_.begin(), root_buckets_.end()), root_buckets_.end());
  for (auto& [m, h] : plan) {
    hooks_.push_back(m->register_forward_pre_hook(
        [this, h](nn::Module&, const nn::TensorList&) {
          h->fired.store(true);
          wait_root_buckets();
          for (size_t b : h->buckets) wait_bucket(b);
        },
        "ZeroRedundancyOptimizer parameter sync"));
    hooked_.push_back(h);
  }
  overlap_ = !hooked_.empty();
  learning_ = overlap_;
}

// ---------------------------------------------------------------- memory

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  if (!inner_) return 0;
  int64_t bytes = 0;
  for (const auto& [impl, st] : inner_->state()) {
    if (!st) continue;
    OrderedDict<std::string, Tensor> tensors;
    st->save("", tensors);
    for (const auto& item : tensors) bytes += static_cast<int64_t>(item.value().nbytes());
  }
  return bytes;
}

}  // namespace dp::distributed
