// The DDP reducer (dp/distributed/reducer.h): bucket readiness, launch in order, the end-of-pass
// callback, unused parameters, and no_sync/accumulate.
//
// Threads: post-accumulate hooks run on whatever thread accumulates a parameter's gradient (the
// caller of backward(), or a CPU device's worker when the model runs under DataParallel), the
// end-of-pass callback on the caller of backward(). All per-pass state is under State::mu. The
// gradient copies into bucket slots happen outside the lock: each parameter's slot is written by
// that parameter's hook only, and its bucket is launched only after that hook has counted it.
#include "dp/distributed/reducer.h"
#include <algorithm>
#include <mutex>
#include "dp/autograd/callback.h"
#include "dp/autograd/grad_mode.h"
#include "dp/distributed/timeline.h"
#include "dp/ops/factory.h"
#include "backend/elementwise_kernels.h"
#include "distributed/reducer_buckets.h"

namespace dp::distributed {
namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// dst = src * factor: one pass of the backend's multiply by a scalar where src has dst's dtype and
// device (the usual case: a gradient stolen by AccumulateGrad going into its bucket slot), else a
// copy and a scaling.
void copy_scaled(Tensor& dst, const Tensor& src, double factor) {
  NoGradGuard no_grad;
  if (factor != 1.0 && src.dtype() == dst.dtype() && src.device() == dst.device() && is_floating_point(dst.dtype())) {
    backend::mul_scalar_kernel(dst.device().type, dst, src, factor);
    dst.bump_version();
    return;
  }
  dst.copy_(src);
  if (factor != 1.0) dst.mul_(factor);
}
}  // namespace

namespace {

// The buckets: laid out once from the parameters (plan_buckets) and the same in every pass. Empty
// on one rank (nothing to reduce).
struct BucketSet {
  std::vector<BucketPlan> plans;  // per bucket: parameter indices and offsets
  std::vector<size_t> bucket_of;  // per parameter
  std::vector<Tensor> buffers;    // per bucket: flat buffer (the last one carries the used marks)
  std::vector<Tensor> grads;      // per bucket: the gradient part of the buffer
  std::vector<Tensor> views;      // per parameter: its .grad-shaped view of its bucket's buffer
  Tensor used_tail;               // the last bucket's tail, one element per parameter
  std::vector<Tensor> shadow;     // Join: zero buffers shaped like `buffers`, for shadow passes
};

// One backward pass: armed by its first gradient (or the model's output), reset by its end.
struct PassState {
  bool armed = false;  // a backward pass has started; its end-of-pass callback is queued
  bool sync = false;   // this pass reduces
  GradReduction reduction = GradReduction::Mean;
  int divisor = 0;              // Join: the ranks a Mean divides by (0: the group size)
  std::vector<uint8_t> ready;   // reached (or marked) in this pass
  std::vector<uint8_t> zeroed;  // had no .grad at the end of the pass: its slot was zeroed
  std::vector<uint8_t> scaled;  // its slot already holds gradient / world (Mean, folded into the copy)
  bool prescale = false;        // this pass averages by scaling each slot once, then sums
  std::vector<int> pending;     // per bucket: parameters not ready yet
  size_t next_launch = 0;
  std::vector<WorkPtr> works;
  WorkPtr used_work;  // with a comm hook: the used marks' own allreduce
  std::string error;  // a misuse found during the pass, reported at its end
  Clock::time_point first_ready, first_launch;
  int64_t pass_start_us = 0;  // when the pass reached this model (the timeline's)
};

}  // namespace

// A reducer's state: the bucket set, the pass in progress and what spans passes (no_sync,
// accumulation, the used marks, the comm hook), shared with the hooks and the end-of-pass callback.
struct Reducer::State {
  ProcessGroupPtr group;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  BucketSet buckets;  // built once
  PassState pass;     // the pass in progress (under mu)

  std::mutex mu;
  // ---- across passes (under mu) ----
  CommHook hook;
  int no_sync_depth = 0;
  int accumulate_every = 1;
  uint64_t passes_in_cycle = 0;  // backward passes since the last synchronised one
  bool last_synced = false;
  int64_t synced_passes = 0;  // backward passes that synchronised: the optimizer steps, as a rank's "step"
  GradReduction next_reduction = GradReduction::Mean;
  int next_divisor = 0;       // Join: the next Mean divides by this many ranks (0: the group size)
  std::vector<uint8_t> used;  // got a gradient in any pass since the last synchronised one
  Tensor used_u8;             // the used marks, in host memory whatever the buckets' device
  // Timeline (timeline.h): whether it records, read once at construction so that with it off the
  // hot path pays one branch on this flag.
  bool timeline_on = false;
  ReducerStats stats;

  bool is_view(size_t i, const Tensor& g) const {
    const Tensor& v = buckets.views[i];
    return g.defined() && g.storage().get() == v.storage().get() && g.storage_offset() == v.storage_offset() && g.sizes() == v.sizes() &&
           g.is_contiguous();
  }
  // Makes parameter i's .grad its bucket view, copying a gradient that lives elsewhere into it
  // (times `factor`: the averaging folded into the copy, which costs nothing extra). Returns
  // whether the slot was written with the factor applied; false also when there is no gradient.
  bool adopt_grad(size_t i, double factor) {
    Tensor g = params[i].grad();
    if (!g.defined() || is_view(i, g)) return false;
    copy_scaled(buckets.views[i], g, factor);
    params[i].set_grad(buckets.views[i]);
    return factor != 1.0;
  }
  bool has_grad(size_t i) const { return params[i].grad().defined(); }
  int mean_divisor() const { return pass.divisor > 0 ? pass.divisor : group->size(); }
  double copy_factor() const { return pass.prescale ? 1.0 / mean_divisor() : 1.0; }

  // ---- under mu ----
  void arm_locked() {
    if (pass.armed) return;
    pass.armed = true;
    ++passes_in_cycle;
    pass.sync = no_sync_depth == 0 && passes_in_cycle % static_cast<uint64_t>(accumulate_every) == 0;
    pass.reduction = next_reduction;
    next_reduction = GradReduction::Mean;
    pass.divisor = next_divisor;
    next_divisor = 0;
    // Without a comm hook the mean over ranks is taken slot by slot (in the gradient copy, or at
    // launch for gradients accumulated in place) and the buckets are summed: no separate pass over
    // the reduced buckets. A hook gets the bucket as it is and averages itself.
    pass.prescale = pass.sync && pass.reduction == GradReduction::Mean && !hook && group->size() > 1;
    std::fill(pass.ready.begin(), pass.ready.end(), 0);
    std::fill(pass.zeroed.begin(), pass.zeroed.end(), 0);
    std::fill(pass.scaled.begin(), pass.scaled.end(), 0);
    for (size_t b = 0; b < buckets.plans.size(); ++b) pass.pending[b] = static_cast<int>(buckets.plans[b].params.size());
    pass.next_launch = 0;
    pass.error.clear();
    pass.first_ready = Clock::now();
    if (timeline_on) pass.pass_start_us = timeline::now_us();
    group->note_progress(synced_passes, "backward");
    std::shared_ptr<State> self = self_ptr.lock();
    autograd::queue_callback([self] { self->finalize(); });
  }
  void mark_ready_locked(size_t i) {
    if (pass.ready[i]) {
      if (pass.error.empty())
        pass.error = detail::str("parameter '", names[i],
                                 "' got its gradient twice in one backward pass (DistributedDataParallel reduces each "
                                 "parameter once per pass: a reentrant backward or a parameter used outside forward causes this)");
      return;
    }
    pass.ready[i] = 1;
    used[i] = 1;
    if (count_ready_locked(buckets.bucket_of[i])) launch_ready_locked();
  }
  // One more parameter of bucket b is ready; true when that was its last. The timeline's "bucket b
  // ready" is this moment: the bucket may still wait for an earlier one before it is launched.
  bool count_ready_locked(size_t b) {
    if (--pass.pending[b] != 0) return false;
    if (timeline_on) timeline::instant(detail::str("bucket ", b, " ready"), "ddp", timeline::now_us(), 0, bucket_args(b));
    return true;
  }
  // The timeline's arguments of bucket b's events in this pass ("step": the optimizer steps before it).
  std::string bucket_args(size_t b) const {
    return detail::str("\"bucket\": ", b, ", \"step\": ", synced_passes, ", \"rank\": ", group->rank(), ", \"bytes\": ", buckets.grads[b].nbytes(),
                       ", \"parameters\": ", buckets.plans[b].params.size());
  }
  void launch_ready_locked() {
    while (pass.next_launch < buckets.plans.size() && pass.pending[pass.next_launch] == 0) launch_locked(pass.next_launch++);
  }
  void launch_locked(size_t b) {
    const bool last = b + 1 == buckets.plans.size();
    if (b == 0) pass.first_launch = Clock::now();
    const int64_t launched_us = timeline_on ? timeline::now_us() : 0;
    const ReduceOp op = pass.reduction == GradReduction::Mean && !pass.prescale ? ReduceOp::Avg : ReduceOp::Sum;
    if (pass.prescale) {  // the slots not yet divided by the world size (accumulated in place)
      NoGradGuard no_grad;
      for (size_t i : buckets.plans[b].params)
        if (!pass.scaled[i] && !pass.zeroed[i]) buckets.views[i].mul_(1.0 / mean_divisor());
    }
    WorkPtr w;
    if (hook) {
      GradBucket gb;
      gb.index = b;
      gb.is_last = last;
      gb.buffer = buckets.grads[b];
      for (size_t i : buckets.plans[b].params) gb.parameters.push_back(params[i]);
      gb.offsets = buckets.plans[b].offsets;
      gb.op = op;
      w = hook(*group, gb);
      DP_CHECK(w != nullptr, ValueError, "DistributedDataParallel: the comm hook returned no Work for bucket ", b);
      if (last) {  // the used marks go on their own: the hook only knows about gradients
        // used_u8 is a host tensor: written on the host.
        uint8_t* u = used_u8.data_ptr<uint8_t>();
        std::copy(used.begin(), used.end(), u);
        pass.used_work = group->allreduce(used_u8, ReduceOp::Max);
      }
    } else {
      if (last) {
        NoGradGuard no_grad;
        // used_u8 is a host tensor: written on the host, then copied to the bucket's device.
        uint8_t* u = used_u8.data_ptr<uint8_t>();
        std::copy(used.begin(), used.end(), u);
        buckets.used_tail.copy_(used_u8);
      }
      w = group->allreduce(buckets.buffers[b], op);
    }
    if (timeline_on)  // from its launch (here, in order) to its completion, on the communication row
      w->then([b, launched_us, args = bucket_args(b)] {
        timeline::span(detail::str("allreduce bucket ", b), "ddp", launched_us, timeline::now_us(), 1, args);
      });
    pass.works[b] = std::move(w);
  }

  // The end of the pass (autograd callback, in the caller of backward()).
  void finalize() {
    std::vector<WorkPtr> wait_for;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!pass.sync || group->size() == 1) {
        pass.armed = false;
        last_synced = pass.sync;
        if (pass.sync) {
          passes_in_cycle = 0;
          ++synced_passes;
        }
        if (timeline_on) timeline::span(pass.sync ? "backward" : "backward (no_sync)", "ddp", pass.pass_start_us, timeline::now_us());
        return;
      }
      // Parameters this pass did not reach: their current .grad (accumulated under no_sync, or set
      // by the user) or zeros go into the reduction, so every rank launches every bucket.
      for (size_t i = 0; i < params.size(); ++i) {
        if (pass.ready[i]) continue;
        if (has_grad(i)) {
          pass.scaled[i] = adopt_grad(i, copy_factor());
        } else {
          NoGradGuard no_grad;
          buckets.views[i].zero_();
          pass.zeroed[i] = 1;
        }
        pass.ready[i] = 1;
        count_ready_locked(buckets.bucket_of[i]);
      }
      launch_ready_locked();
      wait_for = pass.works;
      if (pass.used_work) wait_for.push_back(pass.used_work);
    }
    const Clock::time_point pass_end = Clock::now();
    const int64_t pass_end_us = timeline_on ? timeline::now_us() : 0;
    try {
      for (auto& w : wait_for) w->wait();
    } catch (...) {
      reset_after_pass(false);
      throw;
    }
    const Clock::time_point reduced = Clock::now();
    if (timeline_on) {
      const int64_t now = timeline::now_us();
      timeline::span("wait for buckets", "ddp", pass_end_us, now);
      timeline::span("backward", "ddp", pass.pass_start_us, now);
    }
    std::string misuse;
    {
      std::lock_guard<std::mutex> lock(mu);
      misuse = pass.error;
      // A parameter that had no gradient here but one on another rank gets the reduced one; one no
      // rank used keeps an undefined .grad.
      std::vector<uint8_t> global = global_used();
      for (size_t i = 0; i < params.size(); ++i)
        if (pass.zeroed[i] && global[i]) params[i].set_grad(buckets.views[i]);
      stats.buckets = static_cast<int>(buckets.plans.size());
      stats.backward_ms = ms_between(pass.first_ready, pass_end);
      stats.communication_ms = ms_between(pass.first_launch, reduced);
      stats.exposed_ms = ms_between(pass_end, reduced);
    }
    reset_after_pass(true);
    DP_CHECK(misuse.empty(), AutogradError, "DistributedDataParallel: ", misuse);
  }
  // The reduced used marks, on the host: with a hook, used_u8 (a host tensor) itself; without, the
  // last bucket's tail, on the bucket's device, read through a copy to the host (one per pass, n
  // bytes; it waits for the device).
  std::vector<uint8_t> global_used() {
    std::vector<uint8_t> g(params.size());
    if (params.empty()) return g;
    NoGradGuard no_grad;
    const Tensor marks = hook ? used_u8 : buckets.used_tail.ne(0).to(Device::cpu(), kUInt8);
    const uint8_t* m = marks.data_ptr<uint8_t>();
    for (size_t i = 0; i < params.size(); ++i) g[i] = m[i] != 0 ? 1 : 0;
    return g;
  }
  void reset_after_pass(bool synced) {
    std::lock_guard<std::mutex> lock(mu);
    pass.armed = false;
    last_synced = synced;
    if (synced) group->note_progress(++synced_passes, "after-backward");
    passes_in_cycle = 0;
    std::fill(used.begin(), used.end(), 0);
    std::fill(pass.works.begin(), pass.works.end(), nullptr);
    pass.used_work = nullptr;
  }

  std::weak_ptr<State> self_ptr;
};

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, ProcessGroupPtr group, ReducerOptions options)
    : state_(std::make_shared<State>()), params_(params) {
  DP_CHECK(group != nullptr, ValueError, "DistributedDataParallel: the process group is null");
  DP_CHECK(names.size() == params.size(), ValueError, "Reducer: ", params.size(), " parameters but ", names.size(), " names");
  State& s = *state_;
  s.self_ptr = state_;
  s.group = std::move(group);
  s.params = std::move(params);
  s.names = std::move(names);
  s.timeline_on = timeline::enabled();
  s.buckets.plans = plan_buckets(s.params, options.first_bucket_mb, options.bucket_cap_mb);
  const size_t n = s.params.size();
  s.pass.ready.assign(n, 0);
  s.used.assign(n, 0);
  s.pass.zeroed.assign(n, 0);
  s.pass.scaled.assign(n, 0);
  s.pass.pending.assign(s.buckets.plans.size(), 0);
  s.pass.works.assign(s.buckets.plans.size(), nullptr);
  // One rank has nothing to reduce: no buffers, hooks, copies or collectives; gradients stay where
  // autograd put them. (The model's output hook still marks each backward, for will_sync() and
  // last_backward_synced().)
  if (s.group->size() == 1) return;
  s.buckets.bucket_of.resize(n);
  s.buckets.views.resize(n);
  for (size_t b = 0; b < s.buckets.plans.size(); ++b) {
    const BucketPlan& plan = s.buckets.plans[b];
    const bool last = b + 1 == s.buckets.plans.size();
    // The last bucket carries one "used" mark per parameter after its gradients.
    const int64_t total = plan.numel + (last ? static_cast<int64_t>(n) : 0);
    Tensor buffer = dp::zeros({total}, TensorOptions().dtype(plan.dtype).device(plan.device));
    s.buckets.buffers.push_back(buffer);
    s.buckets.grads.push_back(buffer.narrow(0, 0, plan.numel));
    if (last) s.buckets.used_tail = buffer.narrow(0, plan.numel, static_cast<int64_t>(n));
    for (size_t k = 0; k < plan.params.size(); ++k) {
      const size_t i = plan.params[k];
      s.buckets.bucket_of[i] = b;
      s.buckets.views[i] = buffer.narrow(0, plan.offsets[k], s.params[i].numel()).view(s.params[i].sizes());
    }
  }
  s.used_u8 = dp::zeros({static_cast<int64_t>(n)}, TensorOptions().dtype(kUInt8));  // host memory (see used_u8)
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < params_.size(); ++i) {
    // Before the accumulation: a gradient that arrives a second time in one pass (a reentrant
    // backward) would be added into its bucket while that bucket's allreduce may be reading it.
    // Wait for that allreduce first; the misuse itself is reported at the end of the pass.
    hook_ids_.emplace_back(i, params_[i].register_hook([weak, i](const Tensor&) -> Tensor {
      std::shared_ptr<State> st = weak.lock();
      if (!st) return Tensor();
      WorkPtr in_flight;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        const size_t b = st->buckets.bucket_of[i];
        if (st->pass.armed && st->pass.sync && st->pass.ready[i] && b < st->pass.next_launch) in_flight = st->pass.works[b];
      }
      if (in_flight) {
        try {
          in_flight->wait();
        } catch (...) {  // the pass's end reports the failure (and the misuse)
        }
      }
      return Tensor();
    }));
    hook_ids_.emplace_back(i, params_[i].register_post_accumulate_grad_hook([weak, i](Tensor&) {
      std::shared_ptr<State> st = weak.lock();
      if (!st) return;
      double factor;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        st->arm_locked();
        factor = st->copy_factor();
      }
      // Outside the lock: the copy writes only this parameter's own slot, and its bucket cannot be
      // launched before this hook has counted it below.
      const bool scaled = st->adopt_grad(i, factor);
      std::lock_guard<std::mutex> lock(st->mu);
      st->pass.scaled[i] = scaled;
      if (st->pass.sync)
        st->mark_ready_locked(i);
      else
        st->used[i] = 1;
    }));
  }
}

Reducer::~Reducer() {
  for (const auto& [i, id] : hook_ids_) params_[i].remove_hook(id);
}

void Reducer::prepare_forward() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  s.next_reduction = GradReduction::Mean;
  if (!s.pass.armed) return;
  // The last backward pass started but its end never ran: it threw. Some buckets may be on the
  // wire; the other ranks wait for the rest. Nothing can put the ranks back in step.
  s.pass.armed = false;
  s.passes_in_cycle = 0;
  std::fill(s.used.begin(), s.used.end(), 0);
  std::fill(s.pass.works.begin(), s.pass.works.end(), nullptr);
  s.pass.used_work = nullptr;
  throw DistributedError(detail::str("DistributedDataParallel (rank ", s.group->rank(), " of ", s.group->size(),
                                     "): the previous backward pass failed on this rank before its gradients were reduced, so this rank "
                                     "is out of step with the others; restart the job (from a checkpoint)"));
}

void Reducer::set_next_divisor(int divisor) {
  std::lock_guard<std::mutex> lock(state_->mu);
  DP_CHECK(divisor == 0 || !state_->hook, ValueError,
           "DistributedDataParallel: divide_by_initial_world_size=false cannot be used with a comm hook (the hook averages over the group)");
  state_->next_divisor = divisor;
}

bool Reducer::has_comm_hook() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return static_cast<bool>(state_->hook);
}

void Reducer::shadow_pass(GradReduction reduction) {
  State& s = *state_;
  if (s.group->size() == 1) return;
  std::vector<WorkPtr> works;
  Tensor hook_used_marks;  // with a comm hook: the used marks' own allreduce
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.pass.armed)
      throw DistributedError(dp::detail::str("DistributedDataParallel: a joined rank cannot shadow a backward pass while its own is in progress"));
    if (s.buckets.shadow.empty())
      for (const Tensor& b : s.buckets.buffers) s.buckets.shadow.push_back(dp::zeros_like(b));
    // The same operations the training ranks issue (launch_locked): Mean without a hook prescales
    // and sums; with a hook the hook sees the op it must compute.
    const bool prescale = reduction == GradReduction::Mean && !s.hook;
    const ReduceOp op = reduction == GradReduction::Mean && !prescale ? ReduceOp::Avg : ReduceOp::Sum;
    for (size_t b = 0; b < s.buckets.plans.size(); ++b) {
      const bool last = b + 1 == s.buckets.plans.size();
      if (s.hook) {
        GradBucket gb;
        gb.index = b;
        gb.is_last = last;
        gb.buffer = s.buckets.shadow[b].narrow(0, 0, s.buckets.plans[b].numel);
        for (size_t i : s.buckets.plans[b].params) gb.parameters.push_back(s.params[i]);
        gb.offsets = s.buckets.plans[b].offsets;
        gb.op = op;
        WorkPtr w = s.hook(*s.group, gb);
        DP_CHECK(w != nullptr, ValueError, "DistributedDataParallel: the comm hook returned no Work for bucket ", b);
        works.push_back(std::move(w));
        if (last) {
          hook_used_marks = dp::zeros({static_cast<int64_t>(s.params.size())}, TensorOptions().dtype(kUInt8));
          works.push_back(s.group->allreduce(hook_used_marks, ReduceOp::Max));
        }
      } else {
        works.push_back(s.group->allreduce(s.buckets.shadow[b], op));
      }
    }
  }
  for (auto& w : works) w->wait();
  NoGradGuard no_grad;
  // The joined rank receives the reduced gradients as its .grad (as the training ranks do), so a
  // program can keep its optimizer in step with theirs; a parameter no training rank used keeps its
  // .grad. The used marks came back in the last shadow bucket's tail (with a hook: on their own).
  const size_t n = s.params.size();
  const Tensor used_marks = s.hook ? hook_used_marks : s.buckets.shadow.back().narrow(0, s.buckets.plans.back().numel, static_cast<int64_t>(n));
  const Tensor used_on_cpu = used_marks.ne(0).cpu();
  const bool* used = used_on_cpu.data_ptr<bool>();
  for (size_t b = 0; b < s.buckets.plans.size(); ++b)
    for (size_t k = 0; k < s.buckets.plans[b].params.size(); ++k) {
      const size_t i = s.buckets.plans[b].params[k];
      if (!used[i]) continue;
      s.buckets.views[i].copy_(s.buckets.shadow[b].narrow(0, s.buckets.plans[b].offsets[k], s.params[i].numel()).view(s.params[i].sizes()));
      s.params[i].set_grad(s.buckets.views[i]);
    }
  // Keep the zeros zero for the next shadow pass (the reduction wrote the others' gradients in).
  for (Tensor& t : s.buckets.shadow) t.zero_();
}

void Reducer::set_next_reduction(GradReduction r) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->next_reduction = r;
}

void Reducer::on_backward_reached_output() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->arm_locked();
}

void Reducer::register_comm_hook(CommHook hook) {
  std::lock_guard<std::mutex> lock(state_->mu);
  DP_CHECK(!state_->hook, ValueError, "DistributedDataParallel: a comm hook is already registered (register_comm_hook may be called once)");
  DP_CHECK(!state_->pass.armed, ValueError, "DistributedDataParallel: register_comm_hook during a backward pass");
  state_->hook = std::move(hook);
}

void Reducer::push_no_sync() {
  std::lock_guard<std::mutex> lock(state_->mu);
  ++state_->no_sync_depth;
}
void Reducer::pop_no_sync() {
  std::lock_guard<std::mutex> lock(state_->mu);
  --state_->no_sync_depth;
}

void Reducer::accumulate(int k) {
  DP_CHECK(k >= 1, ValueError, "DistributedDataParallel::accumulate: k must be at least 1, got ", k);
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->accumulate_every = k;
  state_->passes_in_cycle = 0;
}

bool Reducer::will_sync() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  const State& s = *state_;
  return s.no_sync_depth == 0 && (s.passes_in_cycle + 1) % static_cast<uint64_t>(s.accumulate_every) == 0;
}

int64_t Reducer::synced_passes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->synced_passes;
}

bool Reducer::last_backward_synced() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->last_synced;
}

std::vector<std::vector<size_t>> Reducer::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& p : state_->buckets.plans) out.push_back(p.params);
  return out;
}

ReducerStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  ReducerStats st = state_->stats;
  st.bytes = 0;
  for (const auto& g : state_->buckets.grads) st.bytes += static_cast<int64_t>(g.nbytes());
  return st;
}

}  // namespace dp::distributed
