// The backward engine. A GraphTask holds the bookkeeping of one backward()/grad() call: the nodes
// reachable from the roots (each with a per-task index), how many edges still have to deliver into
// each, and the gradients delivered so far. A node becomes ready when all its incoming edges have
// delivered; it then runs on its device's worker thread (host "cpu" nodes, and nodes of the
// caller's own device when backward is called from a worker, run in the calling thread), so the
// parts of the graph that belong to different devices (DataParallel replicas) run in parallel.
// Every traversal is iterative, so graphs of any depth work.
//
// Streams (backward_streams.h): a node off the host runs with the stream its forward ran on
// current, gradients crossing streams are synchronised with events on delivery, and the caller's
// streams wait for the leaves' before backward returns. A graph of host nodes pays one branch per
// node and per delivered gradient for it.
//
// Cost of a small graph: the bookkeeping lives in flat vectors indexed by the per-task node index
// (no per-node allocation, no hashing after the first pass), the task object is reused from a
// per-thread pool (no allocation in steady state), and a graph whose nodes all run in the calling
// thread takes no lock at all.
#include "dp/autograd/engine.h"
#include <functional>
#include "dp/autograd/callback.h"
#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include "dp/autograd/grad_mode.h"
#include "dp/autograd/node.h"
#include "dp/core/device_registry.h"
#include "dp/core/device_runtime.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/shape.h"
#include "amp/autocast_ops.h"
#include "autograd/backward_streams.h"

namespace dp::autograd {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

// Node* -> per-task index: open addressing, linear probing. Entries carry the generation of the
// task that wrote them, so clearing between tasks is O(1) and the table is reused.
class NodeIndex {
 public:
  uint32_t find(const Node* n) const {
    if (slots_.empty()) return kNone;
    for (size_t i = hash(n) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.gen != gen_) return kNone;
      if (s.key == n) return s.value;
    }
  }
  // The index of n; if absent, n is added with index `fresh` and `added` is set.
  uint32_t find_or_add(const Node* n, uint32_t fresh, bool& added) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    for (size_t i = hash(n) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.gen != gen_) {
        s = Slot{n, fresh, gen_};
        ++size_;
        added = true;
        return fresh;
      }
      if (s.key == n) {
        added = false;
        return s.value;
      }
    }
  }
  void clear() {
    size_ = 0;
    if (slots_.size() > kKeepSlots) {
      std::vector<Slot>().swap(slots_);  // a huge graph's table is not kept for later tasks
      mask_ = 0;
    } else if (++gen_ == 0) {  // wrapped: old entries could look current again
      std::fill(slots_.begin(), slots_.end(), Slot{});
      gen_ = 1;
    }
  }

 private:
  struct Slot {
    const Node* key = nullptr;
    uint32_t value = 0;
    uint32_t gen = 0;  // 0 = never used; live entries have gen_
  };
  static constexpr size_t kKeepSlots = 1 << 14;
  static size_t hash(const Node* n) {
    uint64_t x = reinterpret_cast<uintptr_t>(n) >> 4;
    return static_cast<size_t>((x * 0x9E3779B97F4A7C15ull) >> 20);
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(std::max<size_t>(64, old.size() * 2), Slot{});
    mask_ = slots_.size() - 1;
    const uint32_t old_gen = gen_;
    gen_ = 1;
    size_ = 0;
    bool added;
    for (const Slot& s : old)
      if (s.gen == old_gen && s.key) find_or_add(s.key, s.value, added);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
  uint32_t gen_ = 1;
};

struct TaskNode {
  Node* fn;
  Worker* worker;        // where it runs; nullptr: in the calling thread
  uint32_t first_edge;   // its next edges' targets start here in GraphTask::edge_to
  uint32_t first_input;  // its input buffer (one slot per forward output) starts here in GraphTask::inputs
  uint32_t num_inputs;
  int dependencies = 0;   // edges that still have to deliver
  bool needed = true;     // apply() runs (grad(): only nodes that lead to a requested input)
  bool active = true;     // scheduled at all (needed, or where a gradient is captured)
  bool captures = false;  // grad(): some requested input's gradient is read here
  bool is_accumulate;     // an AccumulateGrad: the engine calls accumulate() directly
};

struct Capture {
  uint32_t node;
  uint32_t input_nr;
  uint32_t slot;  // index into the result
};

struct GraphTask {
  // ---- the graph of this task ----
  std::vector<TaskNode> nodes;
  std::vector<uint32_t> edge_to;  // per next edge of every node: target's index, or kNone
  std::vector<Tensor> inputs;     // input buffers, flat
  NodeIndex index;
  std::vector<std::pair<uint32_t, uint32_t>> dfs_stack;
  std::vector<uint32_t> post_order;  // children before parents
  std::vector<Capture> captures;
  std::vector<Tensor> captured;
  std::vector<Edge> root_edges;
  std::vector<Tensor> root_grads;
  std::vector<uint32_t> starts;
  bool keep_graph = false;
  bool create_graph = false;
  // grad_at_edges(): gradients are read at edges whose nodes are barriers (never expanded, never
  // run), without the nodes' output hooks or a leaf's tensor hooks (the outer pass runs those).
  bool raw_captures = false;

  // ---- execution ----
  // Single-threaded (every node runs in the calling thread): no locks; `ready` is a plain stack.
  // Threaded: `ready` (the caller's nodes) and `outstanding` are guarded by `mu`; the input buffer
  // and dependency count of node i by stripes[i % kStripes].
  bool threaded = false;
  Worker* caller_worker = nullptr;
  std::vector<uint32_t> ready;
  int outstanding = 0;  // posted to workers, not yet finished
  std::mutex mu;
  std::condition_variable cv;
  static constexpr size_t kStripes = 16;
  std::array<std::mutex, kStripes> stripes;
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  // queue_callback(): run by the caller after the pass; queued from any thread running a node.
  std::mutex callbacks_mu;
  std::vector<std::function<void()>> callbacks;
  // The streams off the host that leaves' gradients were written on (and grad()'s captured ones
  // read on); guarded by `mu` when threaded. The caller's streams wait for them before backward
  // returns.
  std::vector<Stream> leaf_streams;

  void reset() {
    constexpr size_t kKeep = 4096;  // capacity kept for the next task; more is given back
    auto wipe = [](auto& v) {
      if (v.capacity() > kKeep)
        std::remove_reference_t<decltype(v)>().swap(v);
      else
        v.clear();
    };
    wipe(nodes);
    wipe(edge_to);
    wipe(inputs);
    wipe(dfs_stack);
    wipe(post_order);
    wipe(ready);
    captures.clear();
    captured.clear();
    root_edges.clear();
    root_grads.clear();
    starts.clear();
    index.clear();
    outstanding = 0;
    threaded = false;
    caller_worker = nullptr;
    failed.store(false, std::memory_order_relaxed);
    error = nullptr;
    callbacks.clear();
    leaf_streams.clear();
    raw_captures = false;
  }

  void set_error(std::exception_ptr e) {
    if (threaded) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::move(e);
    } else if (!error) {
      error = std::move(e);
    }
    failed.store(true, std::memory_order_release);
  }
};

// Tasks are reused per thread (nested backward calls take another one).
struct TaskPool {
  std::vector<std::unique_ptr<GraphTask>> free;
};
thread_local TaskPool tls_task_pool;

class TaskLease {
 public:
  TaskLease() {
    auto& pool = tls_task_pool.free;
    if (pool.empty()) {
      task_ = std::make_unique<GraphTask>();
    } else {
      task_ = std::move(pool.back());
      pool.pop_back();
    }
  }
  ~TaskLease() {
    task_->reset();
    auto& pool = tls_task_pool.free;
    if (pool.size() < 4) pool.push_back(std::move(task_));
  }
  TaskLease(const TaskLease&) = delete;
  TaskLease& operator=(const TaskLease&) = delete;
  GraphTask& operator*() const { return *task_; }
  GraphTask* operator->() const { return task_.get(); }

 private:
  std::unique_ptr<GraphTask> task_;
};

void evaluate(GraphTask& task, uint32_t idx, uint32_t* next_here = nullptr);

// The task whose node this thread is running (queue_callback's target); restored on exit, so a
// backward called from inside a node (nested) and a worker's chain of nodes each see their own.
thread_local GraphTask* tls_current_task = nullptr;
class CurrentTaskGuard {
 public:
  explicit CurrentTaskGuard(GraphTask* t) : saved_(tls_current_task) { tls_current_task = t; }
  ~CurrentTaskGuard() { tls_current_task = saved_; }
  CurrentTaskGuard(const CurrentTaskGuard&) = delete;
  CurrentTaskGuard& operator=(const CurrentTaskGuard&) = delete;

 private:
  GraphTask* saved_;
};

// Runs the callbacks queued during the pass, in order, including those they queue themselves.
void run_callbacks(GraphTask& task) {
  for (size_t i = 0;; ++i) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lock(task.callbacks_mu);
      if (i >= task.callbacks.size()) break;
      fn = std::move(task.callbacks[i]);
    }
    CurrentTaskGuard current(&task);  // a callback may queue another
    fn();
  }
}

// The gradient list handed to a node's apply(), from a per-thread cache of emptied lists: a node
// receives its gradients in a fresh vector every time, which was a malloc/free pair per node.
// apply() takes the list by rvalue reference; whatever it leaves there (usually moved-from or
// untouched tensors) is dropped when the lease ends, and the capacity is kept for the next node.
class ListLease {
 public:
  explicit ListLease(size_t n) {
    auto& cache = tls_lists();
    if (!cache.empty()) {
      list = std::move(cache.back());
      cache.pop_back();
    }
    list.resize(n);
  }
  ~ListLease() {
    list.clear();
    auto& cache = tls_lists();
    if (list.capacity() != 0 && list.capacity() <= 64 && cache.size() < 16) cache.push_back(std::move(list));
  }
  ListLease(const ListLease&) = delete;
  ListLease& operator=(const ListLease&) = delete;
  variable_list list;

 private:
  static std::vector<variable_list>& tls_lists() {
    thread_local std::vector<variable_list> cache;
    return cache;
  }
};

// Makes node `idx` run: in the calling thread (pushed on `ready`) or posted to its worker.
void schedule(GraphTask& task, uint32_t idx) {
  Worker* w = task.nodes[idx].worker;
  if (!task.threaded) {
    task.ready.push_back(idx);
    return;
  }
  if (!w) {
    Worker* wake;
    {
      std::lock_guard<std::mutex> lock(task.mu);
      task.ready.push_back(idx);
      task.cv.notify_all();
      wake = task.caller_worker;
    }
    if (wake) wake->notify();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(task.mu);
    ++task.outstanding;
  }
  GraphTask* t = &task;
  try {
    // Two words: stored inside std::function without an allocation. The task outlives the call:
    // its owner waits until `outstanding` is back to 0, which is the closure's last touch.
    w->post([t, idx] {
      // A chain of nodes on this worker runs in this one call, without a round trip through the
      // queue per node (the node that becomes ready here comes back through `next`).
      for (uint32_t cur = idx; cur != kNone;) {
        uint32_t next = kNone;
        evaluate(*t, cur, &next);
        cur = next;
      }
      Worker* wake = nullptr;
      {
        std::lock_guard<std::mutex> lock(t->mu);
        if (--t->outstanding == 0) {
          t->cv.notify_all();  // under the lock: the owner cannot wake and reuse the task before
          wake = t->caller_worker;
        }
      }
      if (wake) wake->notify();
    });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(task.mu);
      --task.outstanding;
    }
    task.set_error(std::current_exception());
  }
}

// The gradients `fn` wrote or handed over (a leaf's .grad, a captured gradient) are ready on its
// stream: the caller's streams will wait for it.
void note_leaf_stream(GraphTask& task, const Node& fn) {
  if (fn.stream().is_cpu()) return;
  if (task.threaded) {
    std::lock_guard<std::mutex> lock(task.mu);
    detail::add_leaf_stream(task.leaf_streams, fn.stream());
  } else {
    detail::add_leaf_stream(task.leaf_streams, fn.stream());
  }
}

// Adds `g` (gradient for input `input_nr` of node `to`) to its buffer; true when `to` is ready.
// Called by g's producer (on its thread, with its stream current) or, for the roots, the caller.
bool deliver(GraphTask& task, uint32_t to, uint32_t input_nr, Tensor&& g) {
  TaskNode& n = task.nodes[to];
  // A gradient off the host is synchronised with the stream the consumer reads it on, which is
  // also where it is summed with the buffer's earlier gradients (those were synchronised with it
  // too).
  std::optional<StreamGuard> on_stream;
  if (g.defined() && !g.is_cpu()) [[unlikely]]
    on_stream.emplace(detail::sync_gradient(g, *n.fn));
  std::unique_lock<std::mutex> lock;
  if (task.threaded) lock = std::unique_lock<std::mutex>(task.stripes[to % GraphTask::kStripes]);
  if (g.defined()) {
    Tensor& slot = task.inputs[n.first_input + input_nr];
    if (!slot.defined())
      slot = std::move(g);
    else
      slot = dp::add(slot, g);
  }
  return --n.dependencies == 0;
}

// Checks a gradient a node returned against the tensor it is for (PyTorch's validate_outputs).
void validate_gradient(const Node& fn, size_t index, Tensor& g, const TensorMeta& meta) {
  DP_CHECK(g.sizes() == meta.sizes, AutogradError, "Function ", fn.name(), " returned an invalid gradient at index ", index, " - got ", g.size_str(),
           " but expected shape compatible with ", shape_str(meta.sizes));
  DP_CHECK(g.device() == meta.device, AutogradError, "Function ", fn.name(), " returned an invalid gradient at index ", index, " - expected device ",
           meta.device.str(), " but got ", g.device().str());
  if (g.dtype() != meta.dtype) g = dp::to(g, meta.device, meta.dtype);
}

// Runs one ready node and delivers its outputs. Never throws: errors are stored in the task.
// With `next_here` (a node running on a worker), one child that became ready on the same worker
// is returned there instead of being scheduled; the caller runs it next.
void evaluate(GraphTask& task, uint32_t idx, uint32_t* next_here) {
  if (task.failed.load(std::memory_order_acquire)) return;
  CurrentTaskGuard current_task(&task);
  try {
    const TaskNode& tn = task.nodes[idx];
    Node* fn = tn.fn;
    // A node off the host runs on the stream its forward ran on; its input gradients were
    // synchronised with that stream when they were delivered. Its outputs are produced there too.
    std::optional<StreamGuard> on_stream;
    if (!fn->stream().is_cpu()) [[unlikely]]
      on_stream.emplace(fn->stream());
    if (tn.is_accumulate && tn.needed) {  // a leaf (its hooks are the tensor's own): no vectors needed
      AutoGradMode grad_mode(task.create_graph);
      static_cast<AccumulateGrad*>(fn)->accumulate(std::move(task.inputs[tn.first_input]));
      note_leaf_stream(task, *fn);
      return;
    }
    ListLease lease(tn.num_inputs);
    variable_list& inputs = lease.list;
    for (uint32_t i = 0; i < tn.num_inputs; ++i) inputs[i] = std::move(task.inputs[tn.first_input + i]);
    AutoGradMode grad_mode(task.create_graph);  // this thread's mode, whatever its previous one
    autocast::detail::Off no_autocast;          // backward runs in the dtypes forward used
    const bool raw = task.raw_captures && tn.captures;
    if (fn->has_output_hooks() && !raw) fn->run_output_hooks(inputs);
    if (tn.captures) {
      for (const Capture& c : task.captures) {
        if (c.node != idx) continue;
        Tensor g = inputs[c.input_nr];
        if (tn.is_accumulate && !raw) g = static_cast<AccumulateGrad*>(fn)->run_tensor_hooks(std::move(g));
        task.captured[c.slot] = std::move(g);
      }
      note_leaf_stream(task, *fn);
    }
    if (!tn.needed) return;

    DP_CHECK(!fn->released.load(std::memory_order_acquire), AutogradError, kSecondBackwardMessage, " (node ", fn->name(), ")");
    if (fn->materialize_grads) {
      const auto& meta = fn->output_meta();
      for (uint32_t i = 0; i < tn.num_inputs; ++i)
        if (!inputs[i].defined()) inputs[i] = dp::zeros(meta[i].sizes, TensorOptions().dtype(meta[i].dtype).device(meta[i].device));
    }
    variable_list outputs;
    {
      CurrentNodeGuard current(fn);
      outputs = fn->apply(std::move(inputs));
    }
    if (!task.keep_graph) {
      fn->released.store(true, std::memory_order_release);
      fn->release_variables();
    }
    const auto& edges = fn->next_edges();
    if (edges.empty()) {
      note_leaf_stream(task, *fn);  // as PyTorch: a node with no next edges is a leaf of the pass
      return;
    }
    DP_CHECK(outputs.size() == edges.size(), AutogradError, "function ", fn->name(), " returned an incorrect number of gradients (expected ",
             edges.size(), ", got ", outputs.size(), ")");
    const uint32_t first_edge = tn.first_edge;
    for (size_t i = 0; i < edges.size(); ++i) {
      const uint32_t to = task.edge_to[first_edge + i];
      if (to == kNone) continue;
      Tensor& g = outputs[i];
      const uint32_t input_nr = edges[i].input_nr;
      if (g.defined()) validate_gradient(*fn, i, g, edges[i].function->output_meta()[input_nr]);
      if (!deliver(task, to, input_nr, std::move(g))) continue;
      if (next_here && *next_here == kNone && task.nodes[to].worker == tn.worker)
        *next_here = to;
      else
        schedule(task, to);
    }
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    // A node of a DataParallel replica: say which, as parallel_apply does for forward errors.
    if (const Node* fn = task.nodes[idx].fn; fn->replica() >= 0) [[unlikely]]
      error = ::dp::detail::with_context(std::move(error), "in replica " + std::to_string(fn->replica()) + " on device " + fn->device().str() +
                                                               " (in backward, node " + fn->name() + ")");
    task.set_error(std::move(error));
  }
}

// Finds every node reachable from the roots (iterative DFS), gives each a task index and its
// buffers, records where each edge leads, and the post order (each node after its children).
// The nodes of `barriers` are added first and never expanded (grad_at_edges()).
void build_graph(GraphTask& task, const std::vector<Edge>& roots, const std::vector<Edge>* barriers = nullptr) {
  auto add = [&](Node* n, bool& added) {
    uint32_t idx = task.index.find_or_add(n, static_cast<uint32_t>(task.nodes.size()), added);
    if (added) {
      const uint32_t num_inputs = n->num_outputs();
      task.nodes.push_back(TaskNode{n, nullptr, static_cast<uint32_t>(task.edge_to.size()), static_cast<uint32_t>(task.inputs.size()), num_inputs, 0,
                                    true, true, false, n->is_accumulate_grad()});
      task.edge_to.resize(task.edge_to.size() + n->next_edges().size(), kNone);
      task.inputs.resize(task.inputs.size() + num_inputs);
    }
    return idx;
  };
  if (barriers) {
    for (const Edge& b : *barriers) {
      bool added;
      uint32_t idx = add(b.function.get(), added);
      if (added) task.post_order.push_back(idx);
    }
  }
  for (const Edge& r : roots) {
    bool added;
    uint32_t root = add(r.function.get(), added);
    if (!added) continue;
    task.dfs_stack.emplace_back(root, 0);
    while (!task.dfs_stack.empty()) {
      auto [cur, next] = task.dfs_stack.back();
      const auto& edges = task.nodes[cur].fn->next_edges();
      if (next == edges.size()) {
        task.post_order.push_back(cur);
        task.dfs_stack.pop_back();
        continue;
      }
      task.dfs_stack.back().second = next + 1;
      Node* child = edges[next].function.get();
      if (!child) continue;
      uint32_t c = add(child, added);
      task.edge_to[task.nodes[cur].first_edge + next] = c;
      if (added) task.dfs_stack.emplace_back(c, 0);
    }
  }
}

void mark_needed_from_captures(GraphTask& task);

// grad(): marks the nodes where requested inputs' gradients are read, the nodes that must run to
// get there (`needed`), and cuts every edge into a node that is not scheduled.
void mark_needed(GraphTask& task, const std::vector<Tensor>& in) {
  task.captured.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    DP_CHECK(t.defined() && t.requires_grad(), AutogradError, "One of the differentiated Tensors does not require grad (input ", i, ")");
    Node* target;
    uint32_t input_nr = 0;
    if (t.grad_fn()) {
      target = t.grad_fn().get();
      input_nr = t.output_nr();
    } else {
      // A leaf takes part only through its existing AccumulateGrad (not one made now).
      AutogradMeta& meta = t.unsafe_impl()->autograd_meta();
      std::lock_guard<std::mutex> lock(meta.mu);
      target = meta.grad_accumulator.lock().get();  // kept alive by the graph if it is in it
    }
    uint32_t idx = target ? task.index.find(target) : kNone;
    if (idx == kNone) continue;  // not reachable from the outputs: unused
    task.nodes[idx].captures = true;
    task.captures.push_back(Capture{idx, input_nr, static_cast<uint32_t>(i)});
  }
  mark_needed_from_captures(task);
}

// grad_at_edges(): the barrier nodes are where the gradients are read.
void mark_needed_edges(GraphTask& task, const std::vector<Edge>& edges) {
  task.captured.resize(edges.size());
  for (size_t i = 0; i < edges.size(); ++i) {
    uint32_t idx = task.index.find(edges[i].function.get());
    task.nodes[idx].captures = true;
    task.captures.push_back(Capture{idx, edges[i].input_nr, static_cast<uint32_t>(i)});
  }
  mark_needed_from_captures(task);
}

void mark_needed_from_captures(GraphTask& task) {
  for (uint32_t idx : task.post_order) {
    TaskNode& n = task.nodes[idx];
    n.needed = false;
    if (n.is_accumulate) continue;  // grad() never writes .grad
    const uint32_t num_edges = static_cast<uint32_t>(n.fn->next_edges().size());
    for (uint32_t k = 0; k < num_edges; ++k) {
      uint32_t c = task.edge_to[n.first_edge + k];
      if (c != kNone && (task.nodes[c].needed || task.nodes[c].captures)) {
        n.needed = true;
        break;
      }
    }
  }
  for (TaskNode& n : task.nodes) n.active = n.needed || n.captures;
  for (TaskNode& n : task.nodes) {
    const uint32_t num_edges = static_cast<uint32_t>(n.fn->next_edges().size());
    for (uint32_t k = 0; k < num_edges; ++k) {
      uint32_t& c = task.edge_to[n.first_edge + k];
      if (c != kNone && !(n.needed && task.nodes[c].active)) c = kNone;
    }
  }
}

// Counts each node's incoming edges (from nodes that run) and decides where each node runs.
void prepare_execution(GraphTask& task) {
  for (const TaskNode& n : task.nodes) {
    if (!n.needed) continue;
    const uint32_t num_edges = static_cast<uint32_t>(n.fn->next_edges().size());
    for (uint32_t k = 0; k < num_edges; ++k) {
      uint32_t c = task.edge_to[n.first_edge + k];
      if (c != kNone) ++task.nodes[c].dependencies;
    }
  }
  for (TaskNode& n : task.nodes) {
    if (!n.active) continue;
    Device d = n.fn->device();
    if (d.is_cpu() && d.index < 0) continue;  // the host: the calling thread
    Worker* w = worker_for(d);
    if (w == task.caller_worker) continue;  // backward called on this device's worker: run here
    n.worker = w;
    task.threaded = true;
  }
}

// The calling thread runs its nodes until every scheduled node has finished.
void run(GraphTask& task) {
  if (!task.threaded) {
    while (!task.ready.empty() && !task.failed.load(std::memory_order_relaxed)) {
      uint32_t idx = task.ready.back();
      task.ready.pop_back();
      evaluate(task, idx);
    }
    return;
  }
  auto take = [&](uint32_t& idx) {  // under task.mu
    if (task.ready.empty()) return false;
    idx = task.ready.back();
    task.ready.pop_back();
    return true;
  };
  for (;;) {
    uint32_t idx;
    if (Worker* w = task.caller_worker) {
      // Called from a device worker: keep serving that worker's queue while waiting, or work
      // queued on this very worker (by this task or another) would never run.
      w->run_until([&] {
        std::lock_guard<std::mutex> lock(task.mu);
        return task.outstanding == 0 || !task.ready.empty();
      });
      std::lock_guard<std::mutex> lock(task.mu);
      if (!take(idx)) {
        if (task.outstanding == 0) return;
        continue;
      }
    } else {
      std::unique_lock<std::mutex> lock(task.mu);
      task.cv.wait(lock, [&] { return task.outstanding == 0 || !task.ready.empty(); });
      if (!take(idx)) return;  // outstanding == 0 and nothing left
    }
    evaluate(task, idx);
  }
}

// roots[0, num_roots) with grad_roots[0, num_grads) (num_grads is 0 or num_roots): spans rather
// than vectors, so Tensor::backward() builds none.
std::vector<Tensor> run_backward(const Tensor* roots, size_t num_roots, const Tensor* grad_roots, size_t num_grads, bool keep_graph,
                                 bool create_graph, const std::vector<Tensor>* inputs, bool allow_unused,
                                 const std::vector<Edge>* capture_edges = nullptr) {
  DP_CHECK(num_grads == 0 || num_grads == num_roots, ValueError, "backward: got ", num_roots, " tensors but ", num_grads, " gradients");
  GraphTask* const outer = tls_current_task;
  TaskLease lease;
  GraphTask& task = *lease;
  task.keep_graph = keep_graph;
  task.create_graph = create_graph;
  task.caller_worker = Worker::current();

  std::vector<Edge>& root_edges = task.root_edges;
  variable_list& root_grads = task.root_grads;
  for (size_t i = 0; i < num_roots; ++i) {
    const Tensor& r = roots[i];
    DP_CHECK(r.defined() && r.requires_grad(), AutogradError, "element ", i, " of tensors does not require grad and does not have a grad_fn");
    Tensor g = num_grads == 0 ? Tensor() : grad_roots[i];
    if (!g.defined()) {
      DP_CHECK(r.numel() == 1, AutogradError, "grad can be implicitly created only for scalar outputs (got a tensor of size ", r.size_str(), ")");
      g = dp::ones_like(r);
    } else {
      DP_CHECK(g.sizes() == r.sizes(), ShapeError, "backward: gradient of size ", g.size_str(), " given for a tensor of size ", r.size_str());
      DP_CHECK(g.device() == r.device(), DeviceError, "backward: gradient on ", g.device().str(), " given for a tensor on ", r.device().str());
    }
    root_edges.push_back(gradient_edge(r));
    root_grads.push_back(std::move(g));
  }

  build_graph(task, root_edges, capture_edges);
  if (inputs) mark_needed(task, *inputs);
  if (capture_edges) {
    task.raw_captures = true;
    mark_needed_edges(task, *capture_edges);
  }
  prepare_execution(task);

  // Seed the roots' gradients (a root given twice gets the sum), then start every root that has
  // nothing left to wait for; the others start when their last incoming edge delivers.
  {
    AutoGradMode grad_mode(create_graph);
    for (size_t i = 0; i < root_edges.size(); ++i) {
      uint32_t idx = task.index.find(root_edges[i].function.get());
      const TaskNode& n = task.nodes[idx];
      if (!n.active) continue;
      // The roots' gradients come from the caller's current stream (as any op's input would).
      std::optional<StreamGuard> on_stream;
      if (!root_grads[i].is_cpu()) on_stream.emplace(detail::sync_gradient(root_grads[i], *n.fn));
      Tensor& slot = task.inputs[n.first_input + root_edges[i].input_nr];
      slot = slot.defined() ? dp::add(slot, root_grads[i]) : std::move(root_grads[i]);
    }
  }
  root_grads.clear();
  // All start nodes are chosen before the first is scheduled: once one runs on a worker, the
  // dependency counts of the others may change under us.
  for (const Edge& e : root_edges) {
    uint32_t idx = task.index.find(e.function.get());
    TaskNode& n = task.nodes[idx];
    if (n.active && n.dependencies == 0) {
      n.dependencies = -1;  // started (a root listed twice starts once)
      task.starts.push_back(idx);
    }
  }
  for (uint32_t idx : task.starts) schedule(task, idx);
  run(task);
  if (task.error) std::rethrow_exception(task.error);
  if (!task.callbacks.empty()) {  // every node has finished: no lock needed to look
    if (outer) {
      // A pass run inside a node of an outer pass (a checkpointed segment's backward, a reentrant
      // backward): what it queued belongs to the outer pass, and runs at its end.
      std::lock_guard<std::mutex> lock(outer->callbacks_mu);
      for (auto& fn : task.callbacks) outer->callbacks.push_back(std::move(fn));
    } else {
      run_callbacks(task);
    }
  }
  // What follows backward on the caller's streams (the optimizer's step) sees every leaf gradient.
  if (!task.leaf_streams.empty()) detail::sync_caller(task.leaf_streams);

  if (capture_edges) return std::move(task.captured);
  if (!inputs) return {};
  for (size_t i = 0; i < inputs->size(); ++i) {
    DP_CHECK(allow_unused || task.captured[i].defined(), AutogradError, "One of the differentiated Tensors (input ", i,
             ") appears to not have been used in the graph. Set allow_unused=True if this is the desired behavior.");
  }
  return std::move(task.captured);
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  GraphTask* task = tls_current_task;
  DP_CHECK(task != nullptr, AutogradError,
           "queue_callback: called outside a backward pass (only a node or a hook running in backward can queue a callback)");
  std::lock_guard<std::mutex> lock(task->callbacks_mu);
  task->callbacks.push_back(std::move(fn));
}

bool in_backward_pass() { return tls_current_task != nullptr; }

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph, bool create_graph) {
  run_backward(roots.data(), roots.size(), grad_roots.data(), grad_roots.size(), retain_graph || create_graph, create_graph, nullptr, false);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs,
                         bool retain_graph, bool create_graph, bool allow_unused) {
  return run_backward(outputs.data(), outputs.size(), grad_outputs.data(), grad_outputs.size(), retain_graph || create_graph, create_graph, &inputs,
                      allow_unused);
}

namespace detail {
std::vector<Tensor> grad_at_edges(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, const std::vector<Edge>& edges,
                                  bool create_graph) {
  return run_backward(roots.data(), roots.size(), grad_roots.data(), grad_roots.size(), create_graph, create_graph, nullptr, true, &edges);
}

void backward_one(const Tensor& root, const Tensor& grad_root, bool retain_graph, bool create_graph) {
  run_backward(&root, 1, &grad_root, 1, retain_graph || create_graph, create_graph, nullptr, false);
}
}  // namespace detail

}  // namespace dp::autograd
