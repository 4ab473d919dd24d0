#pragma once
// The autograd graph: a Node per differentiable op, Edges to the nodes that produced its inputs.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include "dp/core/tensor.h"

namespace dp::autograd {

class Node;
using variable_list = std::vector<Tensor>;

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
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Receives one gradient per forward output (undefined = none arrived, unless the node asks for
  // zeros via materialize_grads) and returns one gradient per next edge (undefined = none).
  virtual variable_list apply(variable_list&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors once the graph has been run without retain_graph.
  virtual void release_variables() {}
  // Leaves' AccumulateGrad returns its tensor; nullptr otherwise.
  virtual TensorImpl* accumulated_tensor() const { return nullptr; }

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  std::vector<Edge>& mutable_next_edges() { return next_edges_; }
  void add_next_edge(Edge e) { next_edges_.push_back(std::move(e)); }
  uint32_t num_outputs() const { return static_cast<uint32_t>(output_meta_.size()); }
  const std::vector<TensorMeta>& output_meta() const { return output_meta_; }
  uint32_t add_output_meta(const Tensor& t);
  // Device whose worker runs this node in backward.
  Device device() const { return device_; }
  void set_device(Device d) { device_ = d; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  // True: outputs that received no gradient are passed to apply() as zeros.
  bool materialize_grads = true;
  // Set once the graph has been run without retain_graph; running it again is an error.
  std::atomic<bool> released{false};

  // Hooks on the gradient of one forward output (non-leaf tensor hooks and retain_grad).
  struct OutputHook {
    int id;
    uint32_t output_nr;
    std::function<Tensor(const Tensor&)> fn;
  };
  std::vector<OutputHook> output_hooks;
  std::mutex hooks_mu;

 private:
  std::vector<Edge> next_edges_;
  std::vector<TensorMeta> output_meta_;
  Device device_;
  uint64_t sequence_nr_;
};

// A node whose backward is a callable (most ops): the callable captures what the op saved.
class FunctionNode : public Node {
 public:
  using BackwardFn = std::function<variable_list(variable_list&&)>;
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return name_; }
  void release_variables() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
};

// Accumulates into a leaf's .grad, running its hooks before and its post-accumulate hooks after.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  TensorImpl* accumulated_tensor() const override { return variable_.unsafe_impl(); }
  const Tensor& variable() const { return variable_; }

 private:
  Tensor variable_;
};

// The edge along which gradient for `t` flows: its grad_fn, its AccumulateGrad if it is a leaf
// that requires grad, or an invalid edge.
Edge gradient_edge(const Tensor& t);
// The leaf's AccumulateGrad node (created on first use, shared afterwards).
std::shared_ptr<Node> grad_accumulator(const Tensor& t);

}  // namespace dp::autograd
