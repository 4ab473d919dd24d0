// Join: finished ranks shadow the collectives of the ranks still training (dp/distributed/join.h).
#include "dp/distributed/join.h"
#include <exception>
#include <string>
#include "dp/core/errors.h"
#include "dp/core/warning.h"
#include "dp/distributed/errors.h"
#include "dp/ops/factory.h"

namespace dp::distributed {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

int JoinRound::active_count() const {
  int n = 0;
  for (uint8_t a : active) n += a;
  return n;
}

int JoinRound::last_active_rank() const {
  for (int r = world - 1; r >= 0; --r)
    if (active[static_cast<size_t>(r)]) return r;
  return -1;
}

Join::Join(std::vector<Joinable*> joinables, JoinOptions options) : joinables_(std::move(joinables)), options_(options) {
  DP_CHECK(!joinables_.empty(), ValueError, "Join: no Joinable objects given (pass the DistributedDataParallel model, e.g. ddp->join())");
  for (size_t i = 0; i < joinables_.size(); ++i) {
    DP_CHECK(joinables_[i] != nullptr, ValueError, "Join: Joinable ", i, " is null");
    DP_CHECK(joinables_[i]->join_ == nullptr, ValueError, "Join: Joinable ", i,
             " is already part of another Join (finish or destroy that one first; Joins do not nest)");
    for (size_t k = 0; k < i; ++k) DP_CHECK(joinables_[k] != joinables_[i], ValueError, "Join: Joinable ", i, " is given twice");
  }
  group_ = &joinables_[0]->join_process_group();
  for (size_t i = 1; i < joinables_.size(); ++i)
    DP_CHECK(&joinables_[i]->join_process_group() == group_, ValueError, "Join: Joinable ", i,
             " uses another process group than Joinable 0 (every object of one Join must use the same group)");
  payload_size_ = joinables_[0]->join_payload_size();
  uncaught_ = std::uncaught_exceptions();
  if (!options_.enable) return;
  for (Joinable* j : joinables_) j->join_ = this;
}

Join::~Join() {
  if (options_.enable && !finished_ && std::uncaught_exceptions() == uncaught_) {
    try {
      finish();
    } catch (const std::exception& e) {
      warn(detail::str("Join: finishing in the destructor failed (call join.finish() to get this as an exception): ", e.what()));
    }
  }
  for (Joinable* j : joinables_)
    if (j->join_ == this) j->join_ = nullptr;
}

JoinRound Join::round(bool active, const std::vector<double>& payload) {
  const int world = group_->size();
  const int rank = group_->rank();
  Tensor v = dp::zeros({world + static_cast<int64_t>(payload_size_)}, TensorOptions().dtype(kFloat64));
  double* p = v.data_ptr<double>();  // a host tensor: the flags and payload are written and read on the host
  if (active) {
    p[rank] = 1;
    for (size_t k = 0; k < payload_size_; ++k) p[static_cast<size_t>(world) + k] = payload[k];
  }
  if (world > 1) group_->allreduce(v, ReduceOp::Sum)->wait();
  JoinRound r;
  r.world = world;
  r.active.resize(static_cast<size_t>(world));
  for (int k = 0; k < world; ++k) r.active[static_cast<size_t>(k)] = p[k] > 0.5 ? 1 : 0;
  r.payload.assign(p + world, p + world + payload_size_);
  return r;
}

JoinRound Join::notify(Joinable& caller, const std::vector<double>& payload) {
  DP_CHECK(options_.enable, ValueError, "Join::notify: this Join is disabled");
  if (finished_)
    throw DistributedError(dp::detail::str("Join: rank ", group_->rank(),
                                           " has finished (join.finish() was called) and cannot start another iteration inside this Join"));
  DP_CHECK(payload.size() == payload_size_, ValueError, "Join::notify: the payload has ", payload.size(), " values, the first Joinable declares ",
           payload_size_);
  (void)caller;
  JoinRound r = round(true, payload);
  if (options_.throw_on_early_termination && r.active_count() < r.world) {
    std::vector<int> out;
    for (int k = 0; k < r.world; ++k)
      if (!r.active[static_cast<size_t>(k)]) out.push_back(k);
    throw DistributedError(detail::str("Join (throw_on_early_termination): rank", out.size() == 1 ? " " : "s ", rank_list(out),
                                       out.size() == 1 ? " exhausted its inputs" : " exhausted their inputs", "; throwing on every rank (rank ",
                                       group_->rank(), " here)"));
  }
  return r;
}

void Join::finish() {
  if (finished_ || !options_.enable) {
    finished_ = true;
    return;
  }
  finished_ = true;
  bool is_last_joiner = true;
  const std::vector<double> none(payload_size_, 0.0);
  // Bounded: each round is one iteration of some rank still training, and every collective is
  // bounded by the group's timeout.
  for (;;) {
    const JoinRound r = round(false, none);
    const int active = r.active_count();
    if (active == 0) break;
    is_last_joiner = false;
    if (options_.throw_on_early_termination)
      throw DistributedError(detail::str("Join (throw_on_early_termination): rank ", group_->rank(), " exhausted its inputs while ", active,
                                         active == 1 ? " rank was" : " ranks were", " still training; throwing on every rank"));
    for (Joinable* j : joinables_) j->join_shadow(r);
  }
  for (Joinable* j : joinables_) j->join_finish(is_last_joiner);
  for (Joinable* j : joinables_)
    if (j->join_ == this) j->join_ = nullptr;
}

}  // namespace dp::distributed
