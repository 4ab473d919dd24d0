// DistributedDataParallel's type-independent half: the model check across ranks, the copy of rank
// 0's state, buffers before each forward, the output hooks, and the global loss of forward_loss.
#include "dp/distributed/distributed_data_parallel.h"
#include <cstring>
#include <utility>
#include "dp/ops/factory.h"

namespace dp::distributed::detail {
namespace {

// "fc.weight\tparameter float32 [10, 5]" — what must agree across ranks.
std::string describe_entry(const std::string& name, const Tensor& t, const char* kind) {
  return dp::detail::str(name, "\t", kind, " ", dtype_name(t.dtype()), " ", t.size_str());
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string join_lines(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// The first entry where `other` differs from `ref`, said in words.
std::pair<std::string, std::string> name_and_kind(const std::string& entry) {
  const size_t tab = entry.find('\t');
  return {entry.substr(0, tab), tab == std::string::npos ? std::string() : entry.substr(tab + 1)};
}
std::string first_difference(const std::vector<std::string>& ref, const std::vector<std::string>& other, int other_rank) {
  const size_t n = std::min(ref.size(), other.size());
  for (size_t i = 0; i < n; ++i) {
    if (ref[i] == other[i]) continue;
    auto [name0, what0] = name_and_kind(ref[i]);
    auto [name1, what1] = name_and_kind(other[i]);
    if (name0 == name1) return dp::detail::str("'", name0, "' is a ", what0, " on rank 0 but a ", what1, " on rank ", other_rank);
    return dp::detail::str("entry ", i, " is '", name0, "' (", what0, ") on rank 0 but '", name1, "' (", what1, ") on rank ", other_rank);
  }
  if (ref.size() != other.size())
    return dp::detail::str("rank 0 has ", ref.size(), " parameters and buffers, rank ", other_rank, " has ", other.size(), " (the first extra is '",
                           name_and_kind(ref.size() > n ? ref[n] : other[n]).first, "')");
  return "their descriptions hash differently but read the same";
}

}  // namespace

DDPCore::DDPCore(const nn::ModulePtr& module, ProcessGroupPtr group, const DistributedDataParallelOptions& options)
    : module_(module), group_(std::move(group)), options_(options) {
  DP_CHECK(group_ != nullptr, ValueError, "DistributedDataParallel: the process group is null");
  std::vector<Tensor> params, state;
  std::vector<std::string> names, descriptions;
  for (const auto& item : module_->named_parameters()) {
    descriptions.push_back(describe_entry(item.key(), item.value(), item.value().requires_grad() ? "parameter" : "frozen parameter"));
    state.push_back(item.value());
    if (!item.value().requires_grad()) continue;
    params.push_back(item.value());
    names.push_back(item.key());
  }
  for (const auto& item : module_->named_buffers()) {
    descriptions.push_back(describe_entry(item.key(), item.value(), "buffer"));
    state.push_back(item.value());
    buffers_.push_back(item.value());
  }
  if (group_->size() > 1) {
    check_same_model(descriptions);
    // Rank 0's values everywhere (raw writes: no autograd version bump).
    if (!state.empty()) group_->broadcast(state, 0)->wait();
  }
  reducer_ = std::make_unique<Reducer>(std::move(params), std::move(names), group_, ReducerOptions{options_.first_bucket_mb, options_.bucket_cap_mb});
}

void DDPCore::check_same_model(const std::vector<std::string>& descriptions) {
  const std::string mine = join_lines(descriptions);
  const uint64_t key = group_->sequence();  // the same on every rank that issued the same collectives
  // The hashes travel in host tensors, written and read on the host.
  Tensor hash = dp::empty({1}, TensorOptions().dtype(kInt64));
  const uint64_t h = fnv1a(mine);
  std::memcpy(hash.data_ptr<int64_t>(), &h, sizeof h);
  std::vector<Tensor> all;
  for (int r = 0; r < group_->size(); ++r) all.push_back(dp::empty({1}, TensorOptions().dtype(kInt64)));
  group_->allgather(all, hash)->wait();
  std::vector<int> differ;
  const int64_t h0 = all[0].item<int64_t>();
  for (int r = 1; r < group_->size(); ++r)
    if (all[r].item<int64_t>() != h0) differ.push_back(r);
  if (differ.empty()) return;
  // Only when they differ: the full descriptions go through the store, so the message can say how.
  Store& store = *group_->store();
  const std::string prefix = dp::detail::str("ddp_model_check/", key, "/");
  store.set(prefix + std::to_string(group_->rank()), mine);
  const std::vector<std::string> ref = split_lines(store.get_string(prefix + "0"));
  const int first = differ.front();
  const std::vector<std::string> other = split_lines(store.get_string(prefix + std::to_string(first)));
  std::string ranks;
  for (size_t i = 0; i < differ.size(); ++i) ranks += (i ? ", " : "") + std::to_string(differ[i]);
  throw DistributedError(dp::detail::str("DistributedDataParallel: the ranks' models differ (every rank must build the same model): ",
                                         first_difference(ref, other, first), "; ranks that differ from rank 0: ", ranks));
}

void DDPCore::before_forward(bool uses_loss) {
  reducer_->prepare_forward();
  group_->note_progress(reducer_->synced_passes(), module_->is_training() ? "forward" : "evaluation");
  round_active_ = 0;
  if (Join* join = join_context()) {
    const bool training = module_->is_training();
    const bool sync = GradMode::is_enabled() && reducer_->will_sync();
    const JoinRound round = join->notify(*this, {sync ? 1.0 : 0.0, uses_loss ? 1.0 : 0.0, training ? 1.0 : 0.0});
    const int active = round.active_count();
    const char* what[] = {"synchronise gradients in this iteration", "use forward_loss", "train (not evaluate)"};
    for (size_t k = 0; k < 3; ++k) {
      const double n = round.payload[k];
      if (!(n == 0 || n == active))
        throw DistributedError(dp::detail::str("DistributedDataParallel inside a Join: ", static_cast<int>(n), " of the ", active,
                                               " ranks still training ", what[k],
                                               ", the others do not: every rank must run the same kind of iteration"));
    }
    round_active_ = active;
    if (!join->options().divide_by_initial_world_size && !uses_loss) reducer_->set_next_divisor(active);
    // Buffers from the highest rank still training (rank 0 may have finished); evaluation inside a
    // Join broadcasts nothing (the finished ranks cannot know an evaluation will need it).
    if (options_.broadcast_buffers && !buffers_.empty() && group_->size() > 1 && training) {
      broadcast_buffers_from(round.last_active_rank());
      buffers_synced_ = false;
    }
    return;
  }
  if (!options_.broadcast_buffers || buffers_.empty() || group_->size() == 1) return;
  // Training: every forward starts from rank 0's buffers (and then updates them locally).
  // Evaluation leaves buffers alone, so one copy after training is enough: evaluation forwards then
  // run no collective and ranks may evaluate different numbers of batches.
  if (module_->is_training()) {
    broadcast_buffers_from(0);
    buffers_synced_ = false;
  } else if (!buffers_synced_) {
    broadcast_buffers_from(0);
    buffers_synced_ = true;
  }
}

void DDPCore::broadcast_buffers_from(int root) { group_->broadcast(buffers_, root)->wait(); }

// A finished rank inside a Join: what one iteration of the ranks still training issues (before_forward,
// global_loss, the reducer's buckets), with zeros and in the same order.
void DDPCore::join_shadow(const JoinRound& round) {
  const bool sync = round.payload[0] > 0, uses_loss = round.payload[1] > 0, training = round.payload[2] > 0;
  if (options_.broadcast_buffers && !buffers_.empty() && group_->size() > 1 && training) broadcast_buffers_from(round.last_active_rank());
  if (uses_loss && group_->size() > 1) group_->allreduce(dp::zeros({3}, TensorOptions().dtype(kFloat64)), ReduceOp::Sum)->wait();
  if (sync) reducer_->shadow_pass(uses_loss ? GradReduction::Sum : GradReduction::Mean);
}

// Every rank takes the state of the rank that finished last (the highest such rank).
void DDPCore::join_finish(bool is_last_joiner) {
  if (group_->size() == 1) return;
  Tensor candidate = dp::full({1}, is_last_joiner ? static_cast<double>(group_->rank()) : -1.0, TensorOptions().dtype(kFloat64));
  group_->allreduce(candidate, ReduceOp::Max)->wait();
  const int root = static_cast<int>(candidate.item<double>());
  if (root < 0) throw DistributedError(dp::detail::str("Join: no rank finished last (a bug: every Join ends with one)"));
  std::vector<Tensor> state;
  for (const auto& item : module_->named_parameters()) state.push_back(item.value());
  for (const Tensor& b : buffers_) state.push_back(b);
  if (!state.empty()) group_->broadcast(state, root)->wait();
}

void DDPCore::mark_outputs(const std::vector<Tensor>& outputs) {
  Reducer* reducer = reducer_.get();
  for (Tensor t : outputs) {
    if (!t.requires_grad() || t.is_leaf()) continue;
    // The hook keeps no reference to the output: it lives on the output's grad_fn, i.e. in this
    // step's graph, and the reducer outlives every graph built by a forward of this model.
    t.register_hook([reducer](const Tensor&) -> Tensor {
      reducer->on_backward_reached_output();
      return Tensor();
    });
  }
}

Tensor DDPCore::global_loss(const parallel::LossPart& local) {
  DP_CHECK(local.sum.defined() && local.sum.numel() == 1, ShapeError,
           "DistributedDataParallel::forward_loss: the criterion must give a one-element loss, got ",
           local.sum.defined() ? local.sum.size_str() : std::string("an undefined tensor"));
  const Tensor sum = local.sum.reshape({});
  // [this rank's summed loss, its row count (or mean denominator), 1 if a mean] over all ranks.
  Tensor pack = dp::empty({3}, TensorOptions().dtype(kFloat64));  // a host tensor, written and read on the host
  double* p = pack.data_ptr<double>();
  {
    NoGradGuard no_grad;
    p[0] = sum.item<double>();
    p[1] = local.count.defined() ? local.count.item<double>() : 0.0;
    p[2] = local.count.defined() ? 1.0 : 0.0;
  }
  const bool mean = local.count.defined();
  if (group_->size() > 1) group_->allreduce(pack, ReduceOp::Sum)->wait();
  const int ranks = round_active_ > 0 ? round_active_ : group_->size();  // inside a Join: the ranks still training
  DP_CHECK(p[2] == (mean ? ranks : 0), ValueError, "DistributedDataParallel::forward_loss: ", static_cast<int>(p[2]), " of ", ranks,
           " ranks computed a mean (the others a sum): every rank must use the same criterion");
  reducer_->set_next_reduction(GradReduction::Sum);
  // Value: the global loss exactly (x - x is 0); gradient: this rank's summed loss over the global
  // count, which the reducer then sums over ranks.
  TensorOptions opts = TensorOptions().dtype(sum.dtype()).device(sum.device());
  Tensor total = dp::full({}, p[0], opts);
  Tensor global = sum - sum.detach() + total;
  if (!mean) return global;
  return global / dp::full({}, p[1], opts);
}

}  // namespace dp::distributed::detail
