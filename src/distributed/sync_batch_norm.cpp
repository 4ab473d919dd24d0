// nn::SyncBatchNorm: statistics combined over DataParallel replicas (in-process rendezvous) and
// the ranks of a process group (one allgather forward, one allreduce backward), as PyTorch's
// torch/nn/modules/_functions.py SyncBatchNorm.
#include "dp/distributed/sync_batch_norm.h"

#include <chrono>
#include <condition_variable>
#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>
#include "dp/autograd/function.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/errors.h"
#include "dp/nn/modules/container.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "dp/core/replica_context.h"

namespace dp::nn {

namespace detail {

// Where the replicas of one layer meet: each brings a float64 vector; the last to arrive sums
// them (in replica order, so the result does not depend on arrival order), lets `finish` turn the
// sum into the result (the process group's collective), and every replica gets that result.
// One round at a time; rounds are told apart by a generation counter.
class SyncBatchNormRendezvous {
 public:
  using Values = std::vector<double>;
  using Finish = std::function<Values(const Values&)>;

  // Touches no tensor: a replica's tensors live on its device, whose worker thread may be the one
  // waiting here (ops on them from another thread would queue behind it).
  Values exchange(int index, int count, Values mine, const Finish& finish, const std::string& what) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto timeout = distributed::ProcessGroupOptions::default_timeout();
    // A round of another size still running (a replica of a previous call late): wait it out.
    if (!cv_.wait_for(lock, timeout, [&] { return arrived_ == 0 || count_ == count; }))
      throw distributed::DistributedError(
          dp::detail::str(what, ": replica ", index, " waited ", timeout.count(), " ms for a round of ", count_, " replicas to end"));
    if (arrived_ == 0) {
      count_ = count;
      parts_.assign(static_cast<size_t>(count), Values());
      filled_.assign(static_cast<size_t>(count), false);
    }
    DP_CHECK(!filled_[static_cast<size_t>(index)], distributed::DistributedError, what, ": replica ", index,
             " entered the same round twice (two replicas with one index)");
    parts_[static_cast<size_t>(index)] = std::move(mine);
    filled_[static_cast<size_t>(index)] = true;
    const uint64_t generation = generation_;
    if (++arrived_ == count_) {
      // Summed in replica order: the result does not depend on arrival order.
      Values sum = parts_[0];
      for (size_t j = 1; j < parts_.size(); ++j) {
        DP_CHECK(parts_[j].size() == sum.size(), distributed::DistributedError, what, ": replicas brought ", sum.size(), " and ", parts_[j].size(),
                 " values (layers of different sizes?)");
        for (size_t k = 0; k < sum.size(); ++k) sum[k] += parts_[j][k];
      }
      std::exception_ptr error;
      Values result;
      lock.unlock();  // the collective may take long; the others only wait for the generation
      try {
        result = finish ? finish(sum) : std::move(sum);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      result_ = std::move(result);
      error_ = error;
      arrived_ = 0;
      parts_.clear();
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, timeout, [&] { return generation_ != generation; })) {
      throw distributed::DistributedError(dp::detail::str(what, ": replica ", index, " waited ", timeout.count(), " ms for the other ", count_ - 1,
                                                          " DataParallel replicas (", arrived_, " of ", count_, " arrived: did a replica fail?)"));
    }
    if (error_) std::rethrow_exception(error_);
    return result_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<Values> parts_;
  std::vector<bool> filled_;
  Values result_;
  std::exception_ptr error_;
};

}  // namespace detail

namespace {

using distributed::ProcessGroupPtr;

// Who takes part in one SyncBatchNorm call: the replica (index, count) of DataParallel and the group.
struct Participants {
  int replica = 0;
  int replicas = 1;
  ProcessGroupPtr group;  // null, or size() > 1
  std::shared_ptr<detail::SyncBatchNormRendezvous> rendezvous;
};

using Values = std::vector<double>;

Tensor host_tensor(const Values& v) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, TensorOptions().dtype(kFloat64));
  std::copy(v.begin(), v.end(), t.data_ptr<double>());
  return t;
}

Values host_values(const Tensor& t) {
  Tensor h = t.to(Device("cpu"), kFloat64).contiguous();
  const double* d = h.data_ptr<double>();
  return Values(d, d + h.numel());
}

// Sums `mine` (float64) over replicas, then runs `collective` (on one replica) on the sum; the
// result on mine's device.
Tensor combine(const Participants& p, const Tensor& mine, const std::function<Tensor(const Tensor&)>& collective, const char* what) {
  if (p.replicas == 1) return p.group ? collective(mine) : mine;
  detail::SyncBatchNormRendezvous::Finish finish;
  if (p.group) finish = [&collective](const Values& v) { return host_values(collective(host_tensor(v))); };
  Values out = p.rendezvous->exchange(p.replica, p.replicas, host_values(mine), finish, what);
  return host_tensor(out).to(mine.device());
}

// Forward statistics: [sum(C), sqsum(C), count] per participant -> global.
Tensor gather_stats(const Participants& p, const Tensor& packed) {
  return combine(
      p, packed,
      [&p](const Tensor& local) {
        const int world = p.group->size();
        std::vector<Tensor> outs;
        outs.reserve(static_cast<size_t>(world));
        for (int r = 0; r < world; ++r) outs.push_back(empty_like(local));
        p.group->allgather(outs, local)->wait();
        // Summed in rank order: every rank gets bit-identical statistics.
        Tensor total = outs[0].clone();
        for (int r = 1; r < world; ++r) total.add_(outs[static_cast<size_t>(r)]);
        return total;
      },
      "SyncBatchNorm forward");
}

Tensor reduce_grad_sums(const Participants& p, const Tensor& packed) {
  return combine(
      p, packed,
      [&p](const Tensor& local) {
        Tensor t = local.clone();
        p.group->allreduce(t)->wait();
        return t;
      },
      "SyncBatchNorm backward");
}

// x viewed as [N, C, L].
Tensor as_ncl(const Tensor& x) {
  int64_t l = 1;
  for (int64_t d = 2; d < x.dim(); ++d) l *= x.size(d);
  return reshape(x, {x.size(0), x.size(1), l});
}

Tensor sync_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor running_mean, Tensor running_var, double momentum,
                       double eps, const Participants& p) {
  const int64_t C = input.size(1);
  const DType dt = input.dtype();
  Tensor x = as_ncl(input.contiguous());
  const int64_t count = x.size(0) * x.size(2);
  Tensor packed = zeros({2 * C + 1}, TensorOptions().dtype(kFloat64).device(input.device()));
  {
    NoGradGuard no_grad;
    if (count > 0) {
      Tensor xd = x.detach();
      packed.narrow(0, 0, C).copy_(sum(xd, {0, 2}, false, kFloat64));
      packed.narrow(0, C, C).copy_(sum(xd * xd, {0, 2}, false, kFloat64));
      packed.narrow(0, 2 * C, 1).fill_(static_cast<double>(count));
    }
  }
  Tensor total = gather_stats(p, packed);
  const bool record_grad = autograd::needs_grad(input, weight, bias);
  double n = 0;
  Tensor mean, invstd, out;
  {
    NoGradGuard no_grad_stats;
    n = total.narrow(0, 2 * C, 1).item<double>();
    DP_CHECK(n > 1, ValueError, "SyncBatchNorm: expected more than 1 value per channel when training over all ranks and replicas, got ", n,
             " (this rank's input ", input.size_str(), ")");
    mean = total.narrow(0, 0, C) / n;
    Tensor var = (total.narrow(0, C, C) / n - mean * mean).clamp(0.0);  // biased
    invstd = rsqrt(var + eps);
    if (running_mean.defined()) {
      running_mean.mul_(1.0 - momentum).add_((mean * momentum).to(running_mean.dtype()));
      running_var.mul_(1.0 - momentum).add_((var * (n / (n - 1.0)) * momentum).to(running_var.dtype()));
    }
    // y = x * scale + shift, per channel.
    Tensor scale = weight.defined() ? invstd * weight.detach().to(kFloat64) : invstd;
    Tensor shift = (bias.defined() ? bias.detach().to(kFloat64) : zeros_like(mean)) - mean * scale;
    out = count > 0 ? (x.detach() * scale.to(dt).view({1, C, 1}) + shift.to(dt).view({1, C, 1})).reshape(input.sizes()) : empty_like(input);
  }
  if (record_grad) {
    const bool gx = input.requires_grad(), gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
    Tensor xs = x.detach(), ws = weight.defined() ? weight.detach() : Tensor();
    const Shape in_shape = input.sizes();
    autograd::record(
        "SyncBatchNormBackward0", {input, weight, bias}, {out},
        [xs, ws, mean, invstd, n, p, gx, gw, gb, C, count, dt, in_shape](autograd::variable_list&& grads) {
          NoGradGuard no_grad;
          Tensor dy = grads[0].defined() ? as_ncl(grads[0].contiguous()) : zeros_like(xs);
          Tensor mean_b = mean.to(dt).view({1, C, 1});
          Tensor packed = zeros({2 * C}, TensorOptions().dtype(kFloat64).device(xs.device()));
          if (count > 0) {
            packed.narrow(0, 0, C).copy_(sum(dy, {0, 2}, false, kFloat64));
            packed.narrow(0, C, C).copy_(sum(dy * (xs - mean_b), {0, 2}, false, kFloat64));
          }
          Tensor local = packed.clone();
          // Only the input gradient needs the global sums (PyTorch skips the allreduce
          // when the input needs no gradient; every rank sees the same graph).
          Tensor global = gx ? reduce_grad_sums(p, packed) : packed;
          Tensor dx, dw, db;
          if (gx) {
            Tensor sum_dy = global.narrow(0, 0, C), sum_dy_xmu = global.narrow(0, C, C);
            Tensor a = ws.defined() ? invstd * ws.to(kFloat64) : invstd;
            Tensor k = invstd * invstd * sum_dy_xmu / n;
            Tensor c = sum_dy / n;
            dx = count > 0 ? ((dy - c.to(dt).view({1, C, 1}) - (xs - mean_b) * k.to(dt).view({1, C, 1})) * a.to(dt).view({1, C, 1})).reshape(in_shape)
                           : zeros(in_shape, TensorOptions().dtype(dt).device(xs.device()));
          }
          if (gw) dw = (local.narrow(0, C, C) * invstd).to(ws.dtype());
          if (gb) db = local.narrow(0, 0, C).to(ws.dtype());
          return autograd::variable_list{dx, dw, db};
        });
  }
  return out;
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const SyncBatchNormOptions& opts)
    : BatchNormImplBase(opts), group_(opts.process_group()), rendezvous_(std::make_shared<detail::SyncBatchNormRendezvous>()) {}

void SyncBatchNormImpl::check_input_dim(const Tensor& input) const {
  DP_CHECK(input.dim() >= 2, ValueError, "SyncBatchNorm: expected at least 2D input (got ", input.dim(), "D input)");
}

Tensor SyncBatchNormImpl::forward(const Tensor& input) {
  check_input_dim(input);
  DP_CHECK(input.size(1) == options.num_features(), ShapeError, "SyncBatchNorm: expected ", options.num_features(), " channels, got input ",
           input.size_str());
  DP_CHECK(input.size(1) > 0, ValueError, "SyncBatchNorm: number of input channels should be non-zero");
  const bool use_batch_stats = is_training() || (!running_mean.defined() && !running_var.defined());
  Participants p;
  bool need_sync = false;
  if (use_batch_stats && is_training()) {
    const auto replica = current_replica();
    if (replica) {
      p.replica = replica->index;
      p.replicas = replica->count;
    }
    if (group_ && group_->size() > 1) p.group = group_;
    DP_CHECK(group_ || replica, distributed::DistributedError, "SyncBatchNorm needs a process group or DataParallel: layer ", name(), " (",
             extra_repr(),
             ") is training outside DataParallel without a process group (give SyncBatchNormOptions::process_group, "
             "convert_sync_batchnorm(module, group), or run it in DataParallel; eval() needs neither)");
    need_sync = p.group || p.replicas > 1;
  }
  if (!need_sync) return BatchNormImplBase::forward(input);
  DP_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64, DTypeError, "SyncBatchNorm: expected a float32 or float64 input, got ",
           input.describe());
  p.rendezvous = rendezvous_;
  double factor = options.momentum().value_or(0.0);
  if (options.track_running_stats() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    if (!options.momentum()) factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  const bool track = options.track_running_stats();
  return sync_batch_norm(input, weight, bias, track ? running_mean : Tensor(), track ? running_var : Tensor(), factor, options.eps(), p);
}

namespace {

ModulePtr to_sync(const std::shared_ptr<BatchNormImplBase>& bn, const distributed::ProcessGroupPtr& group) {
  SyncBatchNormOptions o(bn->options);
  o.process_group(group);
  auto s = std::make_shared<SyncBatchNormImpl>(o);
  // The same tensors (PyTorch assigns module_output.weight = module.weight, and the buffers).
  if (bn->weight.defined()) s->register_parameter("weight", bn->weight, bn->weight.requires_grad());
  if (bn->bias.defined()) s->register_parameter("bias", bn->bias, bn->bias.requires_grad());
  if (bn->running_mean.defined()) {
    s->register_buffer("running_mean", bn->running_mean);
    s->register_buffer("running_var", bn->running_var);
    s->register_buffer("num_batches_tracked", bn->num_batches_tracked);
  }
  s->train(bn->is_training());
  return s;
}

void convert_children(Module& parent, const distributed::ProcessGroupPtr& group) {
  auto* seq = dynamic_cast<SequentialImpl*>(&parent);
  const auto children = parent.named_children();
  for (size_t i = 0; i < children.size(); ++i) {
    const std::string& key = children[i].key();
    const ModulePtr& child = children[i].value();
    if (!child) continue;
    auto bn = std::dynamic_pointer_cast<BatchNormImplBase>(child);
    if (bn && !std::dynamic_pointer_cast<SyncBatchNormImpl>(child)) {
      auto s = std::static_pointer_cast<SyncBatchNormImpl>(to_sync(bn, group));
      if (seq) {
        seq->replace(i, s);
      } else {
        // Held by: `children` here, the parent's registry, `bn` here. More: a member of the parent's class.
        DP_CHECK(bn.use_count() <= 3, ValueError, "convert_sync_batchnorm: ", parent.name(), ".", key,
                 " is also held outside the module registry (a BatchNorm member of the class, or a handle of yours), which cannot be "
                 "re-pointed to the new SyncBatchNorm: declare that layer as an nn::SyncBatchNorm, or keep it only in a Sequential");
        parent.replace_module(key, s);
      }
    } else {
      convert_children(*child, group);
    }
  }
}

}  // namespace

ModulePtr convert_sync_batchnorm(const ModulePtr& module, distributed::ProcessGroupPtr group) {
  DP_CHECK(module != nullptr, ValueError, "convert_sync_batchnorm: null module");
  auto bn = std::dynamic_pointer_cast<BatchNormImplBase>(module);
  if (bn && !std::dynamic_pointer_cast<SyncBatchNormImpl>(module)) return to_sync(bn, group);
  convert_children(*module, group);
  return module;
}

}  // namespace dp::nn
