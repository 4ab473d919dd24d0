#pragma once
// The autograd graph: a Node per differentiable op, Edges to the nodes that produced its inputs.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include "dp/core/pooled.h"
#include "dp/core/stream.h"
#include "dp/core/tensor.h"

namespace dp::autograd {

class Node;
using variable_list = std::vector<Tensor>;

// PyTorch's message for running a graph whose saved state was freed (no retain_graph).
inline constexpr const char* kSecondBackwardMessage =
    "Trying to backward through the graph a second time (or directly access saved tensors after they have already been "
    "freed). Saved intermediate values of the graph are freed when you call .backward() or autograd.grad(). Specify "
    "retain_graph=True if you need to backward through the graph a second time or if you need to access saved tensors "
    "after calling backward.";

// Where gradient flows: input `input_nr` of `function`.
struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;
  bool valid() const { return function != nullptr; }
};

// What a gradient for one output of a node must look like; used to make zeros for outputs that
// received no gradient, and to check what a backward function returns.
struct TensorMeta {
  Shape sizes;
  DType dtype = kFloat32;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  // A node's edges and output descriptions come from the per-thread small-block pool (a small
  // model's step builds and drops a handful of nodes; plain vectors were a malloc/free pair each).
  using edge_list = std::vector<Edge, ::dp::detail::PooledAllocator<Edge>>;
  using meta_list = std::vector<TensorMeta, ::dp::detail::PooledAllocator<TensorMeta>>;

  Node();
  // Destroying the last reference to a long chain of nodes releases it iteratively (a per-thread
  // queue of nodes whose last owner was an edge), so a graph of any depth can be dropped.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Receives one gradient per forward output (undefined = none arrived, unless the node asks for
  // zeros via materialize_grads) and returns one gradient per next edge (undefined = none). Each
  // returned gradient must have the shape and device of the tensor its edge leads to (the engine
  // checks, and converts a differing dtype).
  virtual variable_list apply(variable_list&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors once the graph has been run without retain_graph.
  virtual void release_variables() {}
  // Leaves' AccumulateGrad returns its tensor; nullptr otherwise.
  virtual TensorImpl* accumulated_tensor() const { return nullptr; }
  // True for AccumulateGrad (a flag, so the engine needs no RTTI or virtual call to tell).
  bool is_accumulate_grad() const { return is_accumulate_grad_; }

  const edge_list& next_edges() const { return next_edges_; }
  edge_list& mutable_next_edges() { return next_edges_; }
  void add_next_edge(Edge e) { next_edges_.push_back(std::move(e)); }
  // Room for n edges (record() knows the count: one allocation instead of a growing vector).
  void reserve_next_edges(size_t n) { next_edges_.reserve(n); }
  uint32_t num_outputs() const { return static_cast<uint32_t>(output_meta_.size()); }
  const meta_list& output_meta() const { return output_meta_; }
  uint32_t add_output_meta(const Tensor& t);
  // Device whose worker runs this node in backward. Setting a device other than the host also
  // records the calling thread's current stream of that device (see stream()); a node is given its
  // device where it is made, in the forward pass, so that is the stream the forward op ran on.
  Device device() const { return device_; }
  void set_device(Device d) {
    device_ = d;
    if (!d.is_cpu()) [[unlikely]]
      record_creation_stream();
    else if (!stream_.is_cpu()) [[unlikely]]
      stream_ = Stream();
  }
  // The stream backward runs this node on (PyTorch's Node::stream(), "stream semantics of backward
  // passes"): its device's current stream when set_device() was called; the host's stream for a
  // node on the host. Holding the Stream keeps a stream the user created alive while the graph is.
  const Stream& stream() const { return stream_; }
  // Creation order on the creating thread (as PyTorch's sequence numbers: per thread).
  uint64_t sequence_nr() const { return sequence_nr_; }
  // The DataParallel replica whose forward created this node (ReplicaScope), or -1. An error in its
  // backward is re-thrown "in replica i on device d", as forward errors are.
  int replica() const { return replica_; }
  // True: outputs that received no gradient are passed to apply() as zeros.
  bool materialize_grads = true;
  // Set once the graph has been run without retain_graph; running it again is an error.
  std::atomic<bool> released{false};

  // Hooks on the gradient of one forward output (non-leaf tensor hooks and retain_grad). A hook
  // may return a replacement gradient (undefined = keep). In backward, a node's ordinary hooks run
  // in registration order, then its retain_grad hooks, so .grad of a retained tensor sees the
  // gradient after every hook (as in PyTorch).
  struct OutputHook {
    int id;  // the tensor's handle; retain_grad hooks use kRetainGradHook
    uint32_t output_nr;
    std::function<Tensor(const Tensor&)> fn;
  };
  static constexpr int kRetainGradHook = -1;
  void add_output_hook(OutputHook hook);
  // Removes the hooks with this id on this output; returns them (rebase_history moves them).
  std::vector<OutputHook> remove_output_hooks(int id, uint32_t output_nr);
  bool has_output_hooks() const { return num_output_hooks_.load(std::memory_order_acquire) != 0; }
  // Runs the hooks on `grads` (one per output) in the order above. Used by the engine.
  void run_output_hooks(variable_list& grads);

 protected:
  bool is_accumulate_grad_ = false;

 private:
  edge_list next_edges_;
  meta_list output_meta_;
  Device device_;
  int replica_ = -1;
  uint64_t sequence_nr_;
  std::mutex hooks_mu_;
  std::vector<OutputHook> output_hooks_;
  std::atomic<uint32_t> num_output_hooks_{0};
  void record_creation_stream();  // out of line: host nodes pay only the branch above
  Stream stream_;
};

// While alive, nodes created on this thread belong to DataParallel replica `index` (parallel_apply
// sets it around each replica's forward). Scopes nest; the previous replica is restored.
class ReplicaScope {
 public:
  explicit ReplicaScope(int index) noexcept;
  ~ReplicaScope();
  ReplicaScope(const ReplicaScope&) = delete;
  ReplicaScope& operator=(const ReplicaScope&) = delete;

 private:
  int previous_;
};

// A node whose backward is a callable (most ops): the callable captures what the op saved.
class FunctionNode : public Node {
 public:
  using BackwardFn = std::function<variable_list(variable_list&&)>;
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  // `static_name` must outlive the node (a string literal, as every op's node name is): it is
  // kept as a pointer, so a long name ("BinaryCrossEntropyBackward0") costs no allocation.
  FunctionNode(const char* static_name, BackwardFn fn) : static_name_(static_name), fn_(std::move(fn)) {}
  ~FunctionNode() override;
  // Runs the callable; AutogradError (PyTorch's "backward through the graph a second time") once
  // the saved state was released. Concurrent calls on one node (backward from several threads over
  // a shared graph) are serialised against release_variables().
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return static_name_ ? std::string(static_name_) : name_; }
  void release_variables() override;

 private:
  const char* static_name_ = nullptr;
  std::string name_;
  std::mutex mu_;
  BackwardFn fn_;
};

// Accumulates into a leaf's .grad, running its hooks before and its post-accumulate hooks after.
// The first gradient is stolen when nothing else can see it and copied otherwise, so .grad never
// aliases another tensor; later ones are added in place (out of place under create_graph).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);
  variable_list apply(variable_list&& grads) override;
  // apply() for one gradient, without the vectors (the engine calls this directly).
  void accumulate(Tensor g);
  std::string name() const override { return "AccumulateGrad"; }
  TensorImpl* accumulated_tensor() const override { return variable_.unsafe_impl(); }
  const Tensor& variable() const { return variable_; }
  // Runs the leaf's tensor hooks on g (autograd::grad() runs them on a captured leaf gradient).
  Tensor run_tensor_hooks(Tensor g) const;

 private:
  Tensor variable_;
};

// The edge along which gradient for `t` flows: its grad_fn, its AccumulateGrad if it is a leaf
// that requires grad, or an invalid edge.
Edge gradient_edge(const Tensor& t);
// The leaf's AccumulateGrad node (created on first use, shared afterwards).
std::shared_ptr<Node> grad_accumulator(const Tensor& t);

// While alive, every node created on this thread is listed in nodes() (activation checkpointing
// tells the nodes of a segment from those it reaches outside it). Logs nest: a node goes to the
// innermost one only.
class NodeCreationLog {
 public:
  NodeCreationLog();
  ~NodeCreationLog();
  NodeCreationLog(const NodeCreationLog&) = delete;
  NodeCreationLog& operator=(const NodeCreationLog&) = delete;
  const std::vector<const Node*>& nodes() const { return nodes_; }
  void add(const Node* n) { nodes_.push_back(n); }

 private:
  std::vector<const Node*> nodes_;
  NodeCreationLog* prev_;
};

// The node whose apply() the calling thread is running in backward (nullptr outside backward).
// SavedVariable::unpack uses it to give a saved output its history back under create_graph.
Node* current_node();
class CurrentNodeGuard {
 public:
  explicit CurrentNodeGuard(Node* n);
  ~CurrentNodeGuard();
  CurrentNodeGuard(const CurrentNodeGuard&) = delete;
  CurrentNodeGuard& operator=(const CurrentNodeGuard&) = delete;

 private:
  Node* prev_;
};

}  // namespace dp::autograd
