// The backward engine. A GraphTask holds the bookkeeping of one backward()/grad() call: how many
// edges still have to deliver into each node, and the gradients delivered so far. A node becomes
// ready when all its incoming edges have delivered; it then runs on its device's worker thread
// (host "cpu" nodes run in the calling thread), so the parts of the graph that belong to different
// devices (DataParallel replicas) run in parallel. The traversal is iterative throughout.
#include "dp/autograd/engine.h"
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include "dp/autograd/grad_mode.h"
#include "dp/autograd/node.h"
#include "dp/core/device_registry.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"

namespace dp::autograd {
namespace {

struct GraphTask {
  std::mutex mu;
  std::condition_variable cv;
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, variable_list> buffers;
  std::deque<std::shared_ptr<Node>> caller_queue;  // host nodes, run by the calling thread
  Worker* caller_worker = nullptr;                 // set when backward() is called from a worker
  int outstanding = 0;                             // scheduled, not yet finished
  std::exception_ptr error;
  bool keep_graph = false;
  bool create_graph = false;
  // grad(): where to capture gradients instead of accumulating, and which nodes must run.
  bool accumulate = true;
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> captures;  // node -> (input_nr, slot)
  std::unordered_set<Node*> needed;
  std::vector<Tensor> captured;
};

void schedule(const std::shared_ptr<GraphTask>& task, std::shared_ptr<Node> node);

Tensor zeros_for(const TensorMeta& m) { return dp::zeros(m.sizes, TensorOptions().dtype(m.dtype).device(m.device)); }

// Runs one ready node and delivers its outputs. Never throws: errors are stored in the task.
void evaluate(const std::shared_ptr<GraphTask>& task, const std::shared_ptr<Node>& node) {
  std::vector<std::shared_ptr<Node>> ready;
  try {
    bool skip;
    variable_list inputs;
    {
      std::lock_guard<std::mutex> lock(task->mu);
      skip = task->error != nullptr;
      auto it = task->buffers.find(node.get());
      if (it != task->buffers.end()) {
        inputs = std::move(it->second);
        task->buffers.erase(it);
      }
    }
    if (!skip) {
      inputs.resize(node->num_outputs());
      AutoGradMode grad_mode(task->create_graph);
      // Hooks on non-leaf tensors (and retain_grad) see the gradient of their output.
      std::vector<Node::OutputHook> hooks;
      {
        std::lock_guard<std::mutex> lock(node->hooks_mu);
        hooks = node->output_hooks;
      }
      for (auto& h : hooks) {
        Tensor& g = inputs[h.output_nr];
        if (!g.defined()) continue;
        Tensor r = h.fn(g);
        if (r.defined()) g = std::move(r);
      }
      auto cap = task->captures.find(node.get());
      if (cap != task->captures.end()) {
        std::lock_guard<std::mutex> lock(task->mu);
        for (auto [input_nr, slot] : cap->second) task->captured[slot] = inputs[input_nr];
      }
      const bool run = task->accumulate ? true : task->needed.count(node.get()) > 0;
      if (run) {
        DP_CHECK(!node->released.load(), AutogradError,
                 "Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed). "
                 "Saved intermediate values of the graph are freed when you call .backward() or autograd.grad(). Specify retain_graph=True "
                 "if you need to backward through the graph a second time or if you need to access saved tensors after calling backward. (node ",
                 node->name(), ")");
        if (node->materialize_grads) {
          for (uint32_t i = 0; i < inputs.size(); ++i)
            if (!inputs[i].defined()) inputs[i] = zeros_for(node->output_meta()[i]);
        }
        variable_list outputs = node->apply(std::move(inputs));
        if (!task->keep_graph && !node->accumulated_tensor()) {
          node->release_variables();
          node->released.store(true);
        }
        const auto& edges = node->next_edges();
        DP_CHECK(outputs.size() == edges.size() || edges.empty(), AutogradError, "function ", node->name(), " returned ", outputs.size(),
                 " gradients, but expected ", edges.size());
        std::lock_guard<std::mutex> lock(task->mu);
        for (size_t i = 0; i < edges.size(); ++i) {
          const Edge& e = edges[i];
          if (!e.valid()) continue;
          auto dep = task->dependencies.find(e.function.get());
          if (dep == task->dependencies.end()) continue;  // not part of this task (filtered out)
          if (outputs[i].defined()) {
            variable_list& buf = task->buffers[e.function.get()];
            if (buf.size() < e.function->num_outputs()) buf.resize(e.function->num_outputs());
            Tensor& slot = buf[e.input_nr];
            slot = slot.defined() ? dp::add(slot, outputs[i]) : std::move(outputs[i]);
          }
          if (--dep->second == 0) ready.push_back(e.function);
        }
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(task->mu);
    if (!task->error) task->error = std::current_exception();
    ready.clear();
  }
  for (auto& r : ready) schedule(task, std::move(r));
  bool finished;
  {
    std::lock_guard<std::mutex> lock(task->mu);
    finished = --task->outstanding == 0;
  }
  if (finished) {
    task->cv.notify_all();
    if (task->caller_worker) task->caller_worker->notify();
  }
}

void schedule(const std::shared_ptr<GraphTask>& task, std::shared_ptr<Node> node) {
  {
    std::lock_guard<std::mutex> lock(task->mu);
    ++task->outstanding;
  }
  Worker* w = worker_for(node->device());
  if (w) {
    w->post([task, node = std::move(node)] { evaluate(task, node); });
    return;
  }
  {
    std::lock_guard<std::mutex> lock(task->mu);
    task->caller_queue.push_back(std::move(node));
  }
  task->cv.notify_all();
  if (task->caller_worker) task->caller_worker->notify();
}

// The calling thread runs host nodes until every scheduled node has finished.
void wait_for(const std::shared_ptr<GraphTask>& task) {
  auto take = [&](std::shared_ptr<Node>& out) -> bool {  // under lock
    if (task->caller_queue.empty()) return false;
    out = std::move(task->caller_queue.front());
    task->caller_queue.pop_front();
    return true;
  };
  for (;;) {
    std::shared_ptr<Node> node;
    if (task->caller_worker) {
      // Called from a device worker: keep serving that worker's queue while waiting, or a node
      // scheduled on this very device would never run.
      task->caller_worker->run_until([&] {
        std::lock_guard<std::mutex> lock(task->mu);
        return task->outstanding == 0 || !task->caller_queue.empty();
      });
      std::lock_guard<std::mutex> lock(task->mu);
      if (!take(node) && task->outstanding == 0) return;
    } else {
      std::unique_lock<std::mutex> lock(task->mu);
      task->cv.wait(lock, [&] { return task->outstanding == 0 || !task->caller_queue.empty(); });
      if (!take(node) && task->outstanding == 0) return;
    }
    if (node) evaluate(task, node);
  }
}

// Counts, for every node reachable from the roots, how many edges point at it (iterative DFS),
// and returns the nodes in an order where each appears after everything reachable from it.
std::vector<Node*> compute_dependencies(GraphTask& task, const std::vector<Edge>& roots) {
  std::vector<Node*> post_order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Edge& r : roots) {
    Node* n = r.function.get();
    if (!seen.insert(n).second) continue;
    task.dependencies.emplace(n, 0);
    stack.emplace_back(n, 0);
    while (!stack.empty()) {
      auto& [cur, next] = stack.back();
      const auto& edges = cur->next_edges();
      if (next < edges.size()) {
        Node* child = edges[next++].function.get();
        if (!child) continue;
        ++task.dependencies[child];
        if (seen.insert(child).second) stack.emplace_back(child, 0);
      } else {
        post_order.push_back(cur);
        stack.pop_back();
      }
    }
  }
  return post_order;
}

std::vector<Tensor> run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool keep_graph,
                                 bool create_graph, const std::vector<Tensor>* inputs, bool allow_unused) {
  DP_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), ValueError, "backward: got ", roots.size(), " tensors but ",
           grad_roots.size(), " gradients");
  auto task = std::make_shared<GraphTask>();
  task->keep_graph = keep_graph;
  task->create_graph = create_graph;
  task->accumulate = inputs == nullptr;
  task->caller_worker = Worker::current();

  std::vector<Edge> root_edges;
  variable_list root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    DP_CHECK(r.defined() && r.requires_grad(), AutogradError, "element ", i, " of tensors does not require grad and does not have a grad_fn");
    Tensor g = grad_roots.empty() ? Tensor() : grad_roots[i];
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
  std::vector<Node*> post_order = compute_dependencies(*task, root_edges);

  if (inputs) {
    task->captured.resize(inputs->size());
    std::unordered_set<Node*> targets;
    for (size_t i = 0; i < inputs->size(); ++i) {
      const Tensor& in = (*inputs)[i];
      DP_CHECK(in.defined() && in.requires_grad(), AutogradError, "grad: input ", i, " does not require grad");
      Edge e = in.grad_fn() ? Edge{in.grad_fn(), in.output_nr()} : Edge{grad_accumulator(in), 0};
      task->captures[e.function.get()].emplace_back(e.input_nr, i);
      targets.insert(e.function.get());
    }
    // A node must run if some capture target is reachable below it (post order: children first).
    for (Node* n : post_order) {
      if (n->accumulated_tensor()) continue;  // grad() never writes .grad
      for (const Edge& e : n->next_edges()) {
        Node* c = e.function.get();
        if (c && (targets.count(c) || task->needed.count(c))) {
          task->needed.insert(n);
          break;
        }
      }
    }
  }

  // Seed the roots' gradients, then start every node with nothing left to wait for.
  for (size_t i = 0; i < root_edges.size(); ++i) {
    variable_list& buf = task->buffers[root_edges[i].function.get()];
    buf.resize(root_edges[i].function->num_outputs());
    Tensor& slot = buf[root_edges[i].input_nr];
    slot = slot.defined() ? dp::add(slot, root_grads[i]) : root_grads[i];
  }
  std::unordered_set<Node*> started;
  for (const Edge& e : root_edges) {
    if (task->dependencies[e.function.get()] == 0 && started.insert(e.function.get()).second) schedule(task, e.function);
  }
  wait_for(task);
  if (task->error) std::rethrow_exception(task->error);

  if (!inputs) return {};
  for (size_t i = 0; i < inputs->size(); ++i) {
    DP_CHECK(allow_unused || task->captured[i].defined(), AutogradError, "One of the differentiated Tensors (input ", i,
             ") appears to not have been used in the graph. Set allow_unused=True if this is the desired behavior.");
  }
  return task->captured;
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph, bool create_graph) {
  run_backward(roots, grad_roots, retain_graph || create_graph, create_graph, nullptr, false);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs,
                         bool retain_graph, bool create_graph, bool allow_unused) {
  return run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, &inputs, allow_unused);
}

}  // namespace dp::autograd
