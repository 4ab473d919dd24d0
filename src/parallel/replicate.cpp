// Replicas of a module on several devices, kept between steps and refreshed (see replicate.h).
#include "dp/parallel/replicate.h"
#include <unordered_map>
#include <unordered_set>
#include "dp/autograd/function.h"
#include "dp/core/device_registry.h"
#include "dp/core/pooled.h"
#include "dp/nn/modules/lazy.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/shape.h"
#include "parallel/coalesce.h"
#include "parallel/placement.h"
#include "parallel/reduce.h"

namespace dp::parallel {
namespace detail {
namespace {

const StorageImpl* root_of(const Storage& s) { return s->base() ? s->base().get() : s.get(); }

// A replica parameter on `device` that reads the original's memory (same device: the same storage;
// another CPU device: an alias). Null when the memory can't be shared (then it is copied).
Tensor linked_view(const Tensor& original, Device device) {
  const TensorImpl& o = *original.unsafe_impl();
  Storage storage;
  if (original.device() == device)
    storage = o.storage;
  else if (host_memory(original.device()) && host_memory(device))
    storage = ::dp::detail::make_pooled<StorageImpl>(o.storage, device);
  else
    return Tensor();
  return Tensor(::dp::detail::make_pooled<TensorImpl>(std::move(storage), o.sizes, o.strides, o.offset, o.dtype));
}

bool same_view(const Tensor& a, const Tensor& b) {
  const TensorImpl& x = *a.unsafe_impl();
  const TensorImpl& y = *b.unsafe_impl();
  return root_of(x.storage) == root_of(y.storage) && x.offset == y.offset && x.dtype == y.dtype && x.sizes == y.sizes && x.strides == y.strides;
}

Tensor fresh_copy(const Tensor& t, Device device) {
  NoGradGuard no_grad;
  return t.detach().to(device, t.dtype(), false, /*copy=*/true);
}

void clear_history(const Tensor& t) {
  TensorImpl* impl = t.unsafe_impl();
  if (!impl->autograd) return;
  impl->autograd->grad_fn.reset();
  impl->autograd->output_nr = 0;
  impl->autograd->requires_grad = false;
}

// Pre-order walk of a module tree, each module once, with a fingerprint of every slot.
void walk(const nn::Module& root, std::vector<nn::Module*>& modules, std::vector<Tensor>* params, std::vector<Tensor>* buffers,
          std::vector<const void*>* fingerprint) {
  std::unordered_set<const nn::Module*> seen_modules;
  std::unordered_set<const TensorImpl*> seen_tensors;
  std::vector<nn::Module*> stack{const_cast<nn::Module*>(&root)};
  static const char kEnd = 0;   // separates a module's slots in the fingerprint
  static const char kGrad = 0;  // follows a buffer that requires grad (replicated differentiably)
  while (!stack.empty()) {
    nn::Module* m = stack.back();
    stack.pop_back();
    if (!seen_modules.insert(m).second) continue;
    modules.push_back(m);
    if (fingerprint) fingerprint->push_back(m);
    for (const auto& p : m->own_parameters()) {
      const Tensor& t = p.value();
      if (fingerprint) fingerprint->push_back(t.unsafe_impl());
      if (params && t.defined() && seen_tensors.insert(t.unsafe_impl()).second) params->push_back(t);
    }
    if (fingerprint) fingerprint->push_back(&kEnd);
    for (const auto& b : m->own_buffers()) {
      const Tensor& t = b.value();
      if (fingerprint) fingerprint->push_back(t.unsafe_impl());
      if (fingerprint && t.defined() && t.requires_grad()) fingerprint->push_back(&kGrad);
      if (buffers && t.defined() && seen_tensors.insert(t.unsafe_impl()).second) buffers->push_back(t);
    }
    if (fingerprint) fingerprint->push_back(&kEnd);
    const auto& kids = m->own_children();
    for (size_t i = kids.size(); i-- > 0;) {
      const nn::ModulePtr& c = kids[i].value();
      if (fingerprint) fingerprint->push_back(c.get());
      if (c) stack.push_back(c.get());
    }
  }
}

// Backward of one step's broadcast: receives the gradient of every replica's copy of every parameter
// and buffer that requires grad (replica-major) and returns their sums, one per original tensor.
class BroadcastBackward final : public autograd::Node {
 public:
  BroadcastBackward(size_t replicas, std::vector<TensorSpec> specs, Device destination)
      : replicas_(replicas), specs_(std::move(specs)), destination_(destination) {
    materialize_grads = false;  // a replica that did not use a parameter adds nothing
  }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    const size_t q_count = specs_.size();
    if (GradMode::is_enabled()) {
      // create_graph: the sum is built from differentiable ops (to() and add()), so its own
      // backward broadcasts again and higher derivatives work.
      autograd::variable_list out(q_count);
      for (size_t q = 0; q < q_count; ++q) {
        Tensor sum;
        for (size_t j = 0; j < replicas_; ++j) {
          const Tensor& g = grads[j * q_count + q];
          if (!g.defined()) continue;
          Tensor moved = dp::to(g, destination_, g.dtype());
          sum = sum.defined() ? dp::add(sum, moved) : moved;
        }
        out[q] = sum.defined() ? sum : zeros(specs_[q].sizes, TensorOptions().dtype(specs_[q].dtype).device(destination_));
      }
      return out;
    }
    std::vector<std::vector<Tensor>> per_replica(replicas_);
    for (size_t j = 0; j < replicas_; ++j)
      per_replica[j].assign(std::make_move_iterator(grads.begin() + static_cast<std::ptrdiff_t>(j * q_count)),
                            std::make_move_iterator(grads.begin() + static_cast<std::ptrdiff_t>((j + 1) * q_count)));
    return reduce_sum(per_replica, specs_, destination_);
  }
  std::string name() const override { return "BroadcastBackward"; }

 private:
  size_t replicas_;
  std::vector<TensorSpec> specs_;
  Device destination_;
};

}  // namespace

// What a copied tensor was last copied from: the original's storage and version, and the copy's
// own version right after. A copy is refreshed only when one of them moved, so a forward never
// overwrites a tensor that an earlier forward (not yet backpropagated) saved for its backward.
struct CopyStamp {
  const StorageImpl* source = nullptr;
  uint32_t source_version = 0;
  uint32_t own_version = 0;
};

struct ReplicaSet::Replica {
  Device device;
  nn::ModulePtr root;
  std::vector<nn::Module*> modules;  // aligned with ReplicaSet::modules_
  std::vector<Tensor> params;        // aligned with params_
  std::vector<Tensor> buffers;       // aligned with buffers_ (replica 0: the originals themselves,
                                     // except buffers that require grad, which are linked like parameters)
  std::vector<bool> param_copied;    // true where a parameter could not share memory (copied)
  std::vector<bool> buffer_copied;   // the same for buffers that require grad (unused for others)
  std::vector<CopyStamp> param_stamps;
  std::vector<CopyStamp> buffer_stamps;
};

namespace {

// Copies to refresh between devices that do not share memory (CUDA), made together: one transfer
// per bucket and device instead of one per tensor (copy_coalesced); stamps set once copied.
struct PendingCopies {
  std::vector<Tensor> originals, copies;
  std::vector<CopyStamp*> stamps;
  void flush(Device device) {
    if (originals.empty()) return;
    copy_coalesced(originals, copies, device);
    for (size_t k = 0; k < originals.size(); ++k) *stamps[k] = {root_of(originals[k].storage()), originals[k].version(), copies[k].version()};
    originals.clear();
    copies.clear();
    stamps.clear();
  }
};

// Brings a copy up to date with its original if either changed since the stamp. A same-shaped copy
// across non-host devices is queued on `pending` (when given) instead of copied now.
void refresh_copy(const Tensor& original, Tensor& copy, CopyStamp& stamp, Device device, PendingCopies* pending = nullptr) {
  const TensorImpl& o = *original.unsafe_impl();
  const bool current = stamp.source == root_of(o.storage) && stamp.source_version == original.version() && stamp.own_version == copy.version() &&
                       copy.sizes() == original.sizes() && copy.dtype() == original.dtype();
  if (current) return;
  if (copy.sizes() == original.sizes() && copy.dtype() == original.dtype()) {
    if (pending && (!host_memory(device) || !host_memory(original.device()))) {
      pending->originals.push_back(original);
      pending->copies.push_back(copy);
      pending->stamps.push_back(&stamp);
      return;
    }
    copy.detach().copy_(original);
  } else {
    copy.set_data(fresh_copy(original, device));
  }
  stamp = {root_of(o.storage), original.version(), copy.version()};
}

}  // namespace

ReplicaSet::ReplicaSet(nn::ModulePtr original) : original_(std::move(original)) {
  DP_CHECK(original_ != nullptr, ValueError, "replicate: null module");
  take_snapshot();
}

ReplicaSet::~ReplicaSet() = default;

void ReplicaSet::take_snapshot() {
  modules_.clear();
  params_.clear();
  buffers_.clear();
  fingerprint_.clear();
  walk(*original_, modules_, &params_, &buffers_, &fingerprint_);
  buffer_grad_.clear();
  for (const Tensor& b : buffers_) buffer_grad_.push_back(b.requires_grad());
}

bool ReplicaSet::snapshot_changed() {
  std::vector<nn::Module*> modules;
  std::vector<const void*> fingerprint;
  fingerprint.reserve(fingerprint_.size());
  walk(*original_, modules, nullptr, nullptr, &fingerprint);
  if (fingerprint == fingerprint_) return false;
  take_snapshot();
  replicas_.clear();
  return true;
}

void ReplicaSet::reset() { replicas_.clear(); }

void ReplicaSet::check_location(Device device, const char* what) {
  snapshot_changed();
  auto check = [&](const std::vector<Tensor>& tensors, bool is_param) {
    for (const Tensor& t : tensors) {
      if (t.device() == device) continue;
      std::string name = "?";
      const auto named = is_param ? original_->named_parameters() : original_->named_buffers();
      for (const auto& item : named)
        if (item.value().is_same(t)) name = item.key();
      throw DeviceError(::dp::detail::str("module must have its parameters and buffers on device ", device.str(), " (", what,
                                          ") but found one of them on device: ", t.device().str(), " (", is_param ? "parameter" : "buffer", " '",
                                          name, "'); move the module there first with module->to(\"", device.str(), "\")"));
    }
  };
  check(params_, true);
  check(buffers_, false);
}

void ReplicaSet::build(size_t j, Device device) {
  check_device(device);
  // PyTorch's LazyModuleMixin._replicate_for_data_parallel: a replica can't be made of parameters
  // that have no shape yet (and the first forward, which gives them one, would run per replica).
  if (std::optional<std::string> lazy = nn::first_uninitialized_module(*original_)) {
    const nn::Module* m = original_.get();
    for (const auto& item : original_->named_modules())
      if (item.key() == *lazy) m = item.value().get();
    throw ValueError(
        ::dp::detail::str("Modules with uninitialized parameters can't be used with `DataParallel`. Run a dummy forward pass to "
                          "correctly initialize the modules (uninitialized: ",
                          lazy->empty() ? std::string("the module itself") : "'" + *lazy + "'", ", a ", m->name(), ")"));
  }
  auto rep = std::make_unique<Replica>();
  rep->device = device;
  std::unordered_map<const TensorImpl*, Tensor> made;
  rep->root = original_->clone_with([&](const Tensor& t, bool is_param) -> Tensor {
    Tensor r;
    if (is_param || t.requires_grad()) {
      r = linked_view(t, device);
      if (!r.defined()) r = fresh_copy(t, device);
    } else {
      r = j == 0 ? t : fresh_copy(t, device);  // replica 0 updates the original buffers in place
    }
    made.emplace(t.unsafe_impl(), r);
    return r;
  });
  walk(*rep->root, rep->modules, nullptr, nullptr, nullptr);
  for (nn::Module* m : rep->modules) m->mark_replica(zero_grad_warned_);
  DP_CHECK(rep->modules.size() == modules_.size(), ValueError, "replicate: the copy of ", original_->name(), " has ", rep->modules.size(),
           " modules but the original has ", modules_.size(), " (does a copy constructor register or drop modules?)");
  // PyTorch's replicas share the original's hook dicts: hooks registered on a module, before or after
  // this build, fire in every replica of it.
  for (size_t m = 0; m < modules_.size(); ++m) rep->modules[m]->share_hooks_with(*modules_[m]);
  for (const Tensor& p : params_) {
    Tensor& r = made.at(p.unsafe_impl());
    rep->param_copied.push_back(!same_view(p, r));
    rep->params.push_back(r);
    rep->param_stamps.push_back({root_of(p.storage()), p.version(), r.version()});
  }
  for (const Tensor& b : buffers_) {
    Tensor& r = made.at(b.unsafe_impl());
    rep->buffer_copied.push_back(!same_view(b, r));
    rep->buffers.push_back(r);
    rep->buffer_stamps.push_back({root_of(b.storage()), b.version(), r.version()});
  }
  if (replicas_.size() <= j) replicas_.resize(j + 1);
  replicas_[j] = std::move(rep);
  ++builds_;
}

namespace {

// Brings a replica's parameter (or buffer that requires grad) up to date: while it shares the
// original's memory, re-links it if the original was moved or re-assigned (to(), set_data); once it
// is a copy (memory not shareable), refreshes the copy when its stamp is stale.
void refresh_linked(const Tensor& o, Tensor& r, std::vector<bool>::reference copied, CopyStamp& stamp, Device device, PendingCopies& pending) {
  if (!copied) {
    if (same_view(o, r)) return;
    Tensor v = linked_view(o, device);
    if (v.defined()) {
      r.set_data(v);
      return;
    }
    copied = true;
    stamp = {};  // it just became a copy: refresh it now
  }
  refresh_copy(o, r, stamp, device, &pending);
}

}  // namespace

void ReplicaSet::refresh(size_t j) {
  Replica& rep = *replicas_[j];
  for (size_t m = 0; m < modules_.size(); ++m) rep.modules[m]->set_training_flag(modules_[m]->is_training());
  NoGradGuard no_grad;
  PendingCopies pending;
  for (size_t p = 0; p < params_.size(); ++p)
    refresh_linked(params_[p], rep.params[p], rep.param_copied[p], rep.param_stamps[p], rep.device, pending);
  for (size_t b = 0; b < buffers_.size(); ++b) {
    if (buffer_grad_[b])
      refresh_linked(buffers_[b], rep.buffers[b], rep.buffer_copied[b], rep.buffer_stamps[b], rep.device, pending);
    else if (j != 0)
      refresh_copy(buffers_[b], rep.buffers[b], rep.buffer_stamps[b], rep.device, &pending);  // replica 0's are the originals
  }
  pending.flush(rep.device);
}

// Each step, one BroadcastBackward node links every replica's copy of every parameter and every
// buffer that requires grad (PyTorch broadcasts those buffers differentiably too) to the original.
void ReplicaSet::link_history(size_t count, bool detach) {
  for (auto& rep : replicas_) {
    if (!rep) continue;
    for (const Tensor& t : rep->params) clear_history(t);
    for (size_t b = 0; b < buffers_.size(); ++b)
      if (buffer_grad_[b]) clear_history(rep->buffers[b]);  // never an original: those are linked views or copies
  }
  if (detach) return;
  std::vector<Tensor> originals;  // the inputs of the broadcast: parameters, then buffers
  for (size_t p = 0; p < params_.size(); ++p)
    if (params_[p].requires_grad()) originals.push_back(params_[p]);
  for (size_t b = 0; b < buffers_.size(); ++b)
    if (buffer_grad_[b]) originals.push_back(buffers_[b]);
  if (originals.empty()) return;
  std::vector<TensorSpec> specs;
  specs.reserve(originals.size());
  for (const Tensor& t : originals) specs.push_back({t.sizes(), t.dtype()});
  const Device destination = originals[0].device();
  auto node = std::make_shared<BroadcastBackward>(count, std::move(specs), destination);
  for (const Tensor& t : originals) node->add_next_edge(autograd::gradient_edge(t));
  std::vector<Tensor> outputs;
  outputs.reserve(count * originals.size());
  for (size_t j = 0; j < count; ++j) {
    for (size_t p = 0; p < params_.size(); ++p)
      if (params_[p].requires_grad()) outputs.push_back(replicas_[j]->params[p]);
    for (size_t b = 0; b < buffers_.size(); ++b)
      if (buffer_grad_[b]) outputs.push_back(replicas_[j]->buffers[b]);
  }
  autograd::set_history(outputs, node);
  node->set_device(destination);
}

std::vector<nn::ModulePtr> ReplicaSet::prepare(const std::vector<Device>& devices, bool detach, bool check_structure) {
  DP_CHECK(!devices.empty(), ValueError, "replicate: expected at least one device");
  if (check_structure) snapshot_changed();
  detach = detach || !GradMode::is_enabled();
  std::vector<nn::ModulePtr> out;
  out.reserve(devices.size());
  for (size_t j = 0; j < devices.size(); ++j) {
    if (j >= replicas_.size() || !replicas_[j] || replicas_[j]->device != devices[j]) build(j, devices[j]);
    refresh(j);
    out.push_back(replicas_[j]->root);
  }
  link_history(devices.size(), detach);
  return out;
}

}  // namespace detail

std::vector<nn::ModulePtr> replicate_module(const nn::ModulePtr& module, const std::vector<Device>& devices, bool detach) {
  DP_CHECK(!devices.empty(), ValueError, "replicate: expected at least one device");
  detail::ReplicaSet set(module);
  set.check_location(devices[0], "devices[0]");
  return set.prepare(devices, detach, /*check_structure=*/false);
}

}  // namespace dp::parallel
