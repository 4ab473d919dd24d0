#include "dp/autograd/node.h"
#include "core/autograd_hooks.h"
#include "dp/autograd/engine.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/device_runtime.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/shape.h"

namespace dp::autograd {
namespace {

thread_local uint64_t tls_next_sequence_nr = 0;
thread_local Node* tls_current_node = nullptr;

// Deferred destruction (PyTorch's deleteNode, done from the destructor so that nodes made with
// plain make_shared get it too). Dropping a node releases its edges; if that was the last reference
// to the next node, its destructor would run nested inside this one, and so on down the chain:
// 100,000 nodes overflow the stack. Instead, a destructor that runs while another one on this
// thread is already draining only queues what it owns (its edges, a FunctionNode's callable, whose
// saved tensors may own further nodes) and returns; the outermost destructor drains the queue in a
// loop, so the depth stays constant.
struct DeferredRelease {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<FunctionNode::BackwardFn> fns;
  bool draining = false;
  ~DeferredRelease();
};
thread_local bool tls_release_queue_gone = false;  // trivially destructible: readable at thread exit
thread_local DeferredRelease tls_release;
DeferredRelease::~DeferredRelease() { tls_release_queue_gone = true; }

void drain_deferred() {
  DeferredRelease& q = tls_release;
  q.draining = true;
  while (!q.nodes.empty() || !q.fns.empty()) {
    if (!q.fns.empty()) {
      FunctionNode::BackwardFn fn = std::move(q.fns.back());
      q.fns.pop_back();
      fn = nullptr;  // may destroy saved tensors, whose history lands in the queue
    } else {
      std::shared_ptr<Node> n = std::move(q.nodes.back());
      q.nodes.pop_back();
      n.reset();  // if this was the last reference, ~Node runs here, one level deep
    }
  }
  q.draining = false;
  if (q.nodes.capacity() > 4096) q.nodes.shrink_to_fit();
}

}  // namespace

thread_local int tls_replica = -1;
thread_local NodeCreationLog* tls_creation_log = nullptr;

Node::Node() : replica_(tls_replica), sequence_nr_(tls_next_sequence_nr++) {
  if (tls_creation_log) [[unlikely]]
    tls_creation_log->add(this);
}

NodeCreationLog::NodeCreationLog() : prev_(tls_creation_log) { tls_creation_log = this; }
NodeCreationLog::~NodeCreationLog() { tls_creation_log = prev_; }

ReplicaScope::ReplicaScope(int index) noexcept : previous_(tls_replica) { tls_replica = index; }
ReplicaScope::~ReplicaScope() { tls_replica = previous_; }

Node::~Node() {
  if (tls_release_queue_gone) return;  // thread exit: plain (recursive) release by the members
  DeferredRelease& q = tls_release;
  for (Edge& e : next_edges_) {
    if (!e.function) continue;
    // Only a last reference needs deferring; dropping a shared one just decrements.
    if (e.function.use_count() == 1)
      q.nodes.push_back(std::move(e.function));
    else
      e.function.reset();
  }
  if (!q.draining && (!q.nodes.empty() || !q.fns.empty())) drain_deferred();
}

void Node::record_creation_stream() { stream_ = current_stream(device_); }

uint32_t Node::add_output_meta(const Tensor& t) {
  output_meta_.push_back(TensorMeta{t.sizes(), t.dtype(), t.device()});
  return static_cast<uint32_t>(output_meta_.size() - 1);
}

void Node::add_output_hook(OutputHook hook) {
  std::lock_guard<std::mutex> lock(hooks_mu_);
  output_hooks_.push_back(std::move(hook));
  num_output_hooks_.store(static_cast<uint32_t>(output_hooks_.size()), std::memory_order_release);
}

std::vector<Node::OutputHook> Node::remove_output_hooks(int id, uint32_t output_nr) {
  std::vector<OutputHook> removed;
  std::lock_guard<std::mutex> lock(hooks_mu_);
  for (auto it = output_hooks_.begin(); it != output_hooks_.end();) {
    if (it->id == id && it->output_nr == output_nr) {
      removed.push_back(std::move(*it));
      it = output_hooks_.erase(it);
    } else {
      ++it;
    }
  }
  num_output_hooks_.store(static_cast<uint32_t>(output_hooks_.size()), std::memory_order_release);
  return removed;
}

void Node::run_output_hooks(variable_list& grads) {
  std::vector<OutputHook> hooks;
  {
    std::lock_guard<std::mutex> lock(hooks_mu_);
    hooks = output_hooks_;  // run outside the lock: a hook may register or remove hooks
  }
  auto run = [&](bool retain_pass) {
    for (auto& h : hooks) {
      if ((h.id == kRetainGradHook) != retain_pass || h.output_nr >= grads.size()) continue;
      Tensor& g = grads[h.output_nr];
      if (!g.defined()) continue;
      Tensor r = h.fn(g);
      if (r.defined()) g = std::move(r);
    }
  };
  run(false);
  run(true);
}

variable_list FunctionNode::apply(variable_list&& grads) {
  std::lock_guard<std::mutex> lock(mu_);
  DP_CHECK(fn_ != nullptr, AutogradError, kSecondBackwardMessage, " (node ", name_, ")");
  return fn_(std::move(grads));
}

void FunctionNode::release_variables() {
  BackwardFn dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = std::move(fn_);
    fn_ = nullptr;
  }
  // `dropped` (and the saved tensors it holds) is destroyed here, outside the lock.
}

FunctionNode::~FunctionNode() {
  // The callable's saved tensors may own the next nodes of a long chain: release it through the
  // deferred queue (see DeferredRelease) rather than as a member, which would recurse.
  if (fn_ && !tls_release_queue_gone) tls_release.fns.push_back(std::move(fn_));
}

AccumulateGrad::AccumulateGrad(Tensor variable) : variable_(std::move(variable)) {
  set_device(variable_.device());
  add_output_meta(variable_);
  materialize_grads = false;  // no gradient arrived: .grad stays as it is (PyTorch: None)
  is_accumulate_grad_ = true;
}

namespace {
std::vector<TensorHook> copy_hooks(const AutogradMeta& meta) {  // under meta.mu
  std::vector<TensorHook> hooks;
  hooks.reserve(meta.hooks.size());
  for (auto& h : meta.hooks) hooks.push_back(h.second);
  return hooks;
}
Tensor run_hooks(const std::vector<TensorHook>& hooks, Tensor g) {
  for (auto& h : hooks) {
    Tensor r = h(g);
    if (r.defined()) g = std::move(r);
  }
  return g;
}
}  // namespace

Tensor AccumulateGrad::run_tensor_hooks(Tensor g) const {
  AutogradMeta* meta = variable_.unsafe_impl()->autograd.get();
  if (!meta || !g.defined()) return g;
  std::vector<TensorHook> hooks;
  {
    std::lock_guard<std::mutex> lock(meta->mu);
    if (meta->hooks.empty()) return g;
    hooks = copy_hooks(*meta);
  }
  return run_hooks(hooks, std::move(g));
}

variable_list AccumulateGrad::apply(variable_list&& grads) {
  Tensor g = std::move(grads[0]);
  grads.clear();  // drop our reference to the buffer: the steal test counts references
  accumulate(std::move(g));
  return {};
}

void AccumulateGrad::accumulate(Tensor g) {
  if (!g.defined()) return;
  AutogradMeta& meta = variable_.unsafe_impl()->autograd_meta();
  const bool create_graph = GradMode::is_enabled();
  std::vector<PostAccumulateGradHook> post;
  std::unique_lock<std::mutex> lock(meta.mu);
  if (!meta.hooks.empty()) {
    // Tensor hooks run outside the lock (user code; it may touch this tensor).
    std::vector<TensorHook> hooks = copy_hooks(meta);
    lock.unlock();
    g = run_hooks(hooks, std::move(g));
    if (!g.defined()) return;
    lock.lock();
  }
  if (!meta.grad || !meta.grad->defined()) {
    // Steal the incoming gradient when nothing else can see it: this is the only handle to it
    // and to its memory, it has the leaf's layout and no history. Otherwise copy, so .grad never
    // aliases another tensor (a user's gradient, a hook's tensor, another leaf's .grad).
    // Under create_graph the copy is a differentiable clone, so .grad keeps its history.
    const bool stealable = !create_graph && g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous() &&
                           g.storage_offset() == 0 && !g.requires_grad() && g.sizes() == variable_.sizes() && g.dtype() == variable_.dtype();
    Tensor stored;
    if (stealable) {
      stored = std::move(g);
    } else if (create_graph) {
      stored = dp::clone(g);
    } else {
      NoGradGuard no_grad;
      stored = dp::clone(g.detach());
    }
    meta.grad = ::dp::detail::make_pooled<Tensor>(std::move(stored));
  } else if (create_graph) {
    meta.grad = ::dp::detail::make_pooled<Tensor>(dp::add(*meta.grad, g));
  } else {
    NoGradGuard no_grad;
    dp::add_(*meta.grad, g);  // in place, as PyTorch (optimizers may hold this tensor)
  }
  if (!meta.post_accumulate_hooks.empty()) {
    post.reserve(meta.post_accumulate_hooks.size());
    for (auto& h : meta.post_accumulate_hooks) post.push_back(h.second);
  }
  lock.unlock();
  for (auto& h : post) h(variable_);
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Edge{};
  if (const auto& fn = t.grad_fn()) return Edge{fn, t.output_nr()};
  return Edge{grad_accumulator(t), 0};
}

std::shared_ptr<Node> grad_accumulator(const Tensor& t) {
  AutogradMeta& meta = t.unsafe_impl()->autograd_meta();
  std::lock_guard<std::mutex> lock(meta.mu);
  if (auto acc = meta.grad_accumulator.lock()) return acc;
  auto acc = ::dp::detail::make_pooled<AccumulateGrad>(t);  // made again every step once the graph is freed
  meta.grad_accumulator = acc;
  return acc;
}

Node* current_node() { return tls_current_node; }
CurrentNodeGuard::CurrentNodeGuard(Node* n) : prev_(tls_current_node) { tls_current_node = n; }
CurrentNodeGuard::~CurrentNodeGuard() { tls_current_node = prev_; }

// ---- core's view of autograd (core/autograd_hooks.h) ----
// Installed from this file because every graph needs it: a program that has a graph to run
// backward on, a grad_fn to hook or an accumulator to check has linked it.
namespace {

static_assert(Node::kRetainGradHook == ::dp::detail::kRetainGradHookId, "core and autograd must agree on retain_grad's hook id");

class Hooks final : public ::dp::detail::AutogradHooks {
 public:
  void backward(const Tensor& self, const Tensor& gradient, bool retain_graph, bool create_graph) const override {
    detail::backward_one(self, gradient, retain_graph, create_graph);
  }
  bool accumulator_matches(const Node& accumulator, Device device, DType dtype) const override {
    const TensorMeta& m = accumulator.output_meta()[0];
    return m.device == device && m.dtype == dtype;
  }
  void add_output_hook(Node& fn, int id, uint32_t output_nr, TensorHook hook) const override { fn.add_output_hook({id, output_nr, std::move(hook)}); }
  void remove_output_hooks(Node& fn, int id, uint32_t output_nr) const override { fn.remove_output_hooks(id, output_nr); }
};

const Hooks hooks;
const bool hooks_installed = [] {
  ::dp::detail::set_autograd_hooks(&hooks);
  return true;
}();

}  // namespace

}  // namespace dp::autograd
