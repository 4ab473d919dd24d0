#pragma once
// Internal helpers of the element-wise ops (src/ops/elementwise_*.cpp, activation.cpp,
// type_promotion.cpp): type promotion state, operand checks and conversion, output allocation,
// and the autograd glue (a node type whose backward is an inlined callable, gradient reduction to
// an input's shape and dtype, re-attaching a saved output for double backward).
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include "dp/core/pooled.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "backend/elementwise_math.h"
#include "ops/common.h"

namespace dp::ops {

// ---------------------------------------------------------------- type promotion (type_promotion.cpp)

// PyTorch's ResultTypeState: the promoted dtype of dimensioned tensors, of 0-dim tensors and of
// Scalars ("wrapped numbers", floating ones counting as the default dtype), kept apart and
// combined by category at the end.
class TypeState {
 public:
  void add(const Tensor& t);
  void add(const Scalar& s);
  DType result() const;

 private:
  int dim_ = -1, zero_ = -1, wrapped_ = -1;  // -1: no operand of that kind yet
};

// PyTorch's canCast: no floating result into an integer tensor, nothing but bool into bool.
bool can_cast(DType from, DType to);
// PyTorch's ScalarType spelling used in its messages: "Float", "Long", "Bool", ...
using backend::torch_type_name;
// DTypeError "result type Float can't be cast to the desired output type Long".
void check_can_cast(const char* op, DType result, DType out);
// add/sub's checks of alpha against the result dtype, and sub's refusal of bool operands.
void check_alpha(const char* op, DType result, const Scalar& alpha);
void check_sub(const char* op, DType a, DType b);
// -s in the same category.
Scalar negate(const Scalar& s);
// The floating dtype a "floating op" (exp, sqrt, div, ...) computes in: t itself when floating,
// the default float dtype for integers and bool.
inline DType to_float_dtype(DType t) { return is_floating_point(t) ? t : default_float_dtype(); }

// ---------------------------------------------------------------- operands and outputs

// Defined, and on a device the kernels can run on (host memory: every CPU device).
void check_input(const char* op, const Tensor& t);
void check_binary(const char* op, const Tensor& a, const Tensor& b);
// The broadcast shape of a and b (a's sizes when they are equal).
inline Shape out_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.sizes() == b.sizes()) return a.sizes();
  return broadcast_shapes(a.sizes(), b.sizes(), op);
}
// A fresh contiguous output; large ones are advised to use huge pages (first touch of a fresh
// multi-megabyte buffer otherwise costs more than the arithmetic).
Tensor new_output(IntArrayRef sizes, DType dtype, Device device);
// A fresh tensor of zeros (constant, no history): gradients of inputs that do not affect the result.
Tensor zeros_of(IntArrayRef sizes, DType dtype, Device device);
// dst (any layout) <- src converted to dst's dtype, src broadcast to dst's shape.
void copy_into(const Tensor& dst, const Tensor& src);
// A fresh output of a and b's broadcast shape.
inline Tensor new_output_like(const Tensor& a, const Tensor& b, const char* op, DType dtype, Device device) {
  if (a.device() != b.device() && !b.is_cpu()) device = b.device();  // a CPU 0-dim a with a device b
  if (a.sizes() == b.sizes()) return new_output(a.sizes(), dtype, device);
  return new_output(broadcast_shapes(a.sizes(), b.sizes(), op), dtype, device);
}
// t converted to dtype (t itself when it already has it); no autograd history.
Tensor to_dtype(const Tensor& t, DType dtype);

// In-place ops: self must not need to grow, must be writable element by element (no two elements
// sharing memory), and the result dtype must cast into it.
void check_inplace_shape(const char* op, const Tensor& self, const Tensor& other);
void check_no_internal_overlap(const char* op, const Tensor& self);
// `t` itself, or a private copy when it shares memory with `self` without being exactly self (a
// partially overlapping input would be overwritten while it is read).
Tensor unaliased(const Tensor& self, const Tensor& t);
bool same_memory(const Tensor& a, const Tensor& b);

// Runs kernel(out, self_in) writing the op's result for `self` in dtype `ct`: straight into self
// when ct is self's dtype, else through a temporary that is then cast into self.
template <typename K>
void run_inplace(Tensor& self, DType ct, K&& kernel) {
  if (ct == self.dtype()) {
    kernel(self, self);
  } else {
    Tensor tmp = new_output(self.sizes(), ct, self.device());
    kernel(tmp, to_dtype(self, ct));
    copy_into(self, tmp);
  }
}

// ---------------------------------------------------------------- autograd

using autograd::variable_list;

// A backward node whose function is an inlined callable: fn(Node& self, const Tensor& grad)
// returns one gradient per input edge. Every element-wise op has one output.
template <typename F>
class EwNode final : public autograd::Node {
 public:
  EwNode(const char* name, F fn) : name_(name), fn_(std::move(fn)) {}
  // Serialised against release_variables(), as FunctionNode (backward over a shared graph from
  // several threads).
  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mu_);
    DP_CHECK(fn_.has_value(), AutogradError,
             "Trying to backward through the graph a second time (or directly access saved tensors after they have already "
             "been freed). Specify retain_graph=True if you need to backward through the graph a second time. (node ",
             name_, ")");
    return (*fn_)(static_cast<autograd::Node&>(*this), grads[0]);
  }
  std::string name() const override { return name_; }
  void release_variables() override {
    std::optional<F> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fn_) {
        dropped.emplace(std::move(*fn_));
        fn_.reset();
      }
    }
    // The saved tensors are destroyed here, outside the lock.
  }

 private:
  const char* name_;
  std::mutex mu_;
  std::optional<F> fn_;
};

// Out-of-place op: a node with edges to `inputs` (in order) becomes out's grad_fn.
template <typename F>
void record(const char* name, std::initializer_list<const Tensor*> inputs, const Tensor& out, F&& fn) {
  auto node = ::dp::detail::make_pooled<EwNode<std::decay_t<F>>>(name, std::forward<F>(fn));
  for (const Tensor* t : inputs) node->add_next_edge(autograd::gradient_edge(*t));
  autograd::set_history({out}, node);
}

// In-place op: the edges are taken before self's history is replaced by the node.
template <typename F>
void record_inplace(const char* name, std::initializer_list<const Tensor*> inputs, Tensor& self, F&& fn) {
  auto node = ::dp::detail::make_pooled<EwNode<std::decay_t<F>>>(name, std::forward<F>(fn));
  for (const Tensor* t : inputs) node->add_next_edge(autograd::gradient_edge(*t));
  autograd::rebase_history(self, node);
}

// What a gradient for one input must look like: its sizes and dtype, and whether it is wanted.
struct GradInfo {
  Shape sizes;
  DType dtype = kFloat32;
  bool needed = false;
  GradInfo() = default;
  explicit GradInfo(const Tensor& t) : sizes(t.sizes()), dtype(t.dtype()), needed(t.requires_grad()) {}
  // Sums a broadcast gradient down to the input's sizes and casts it to the input's dtype.
  Tensor reduce(const Tensor& g) const;
};

// A saved output of `node`, with `node` re-attached as its grad_fn while a differentiable backward
// runs (create_graph), so formulas that use the output are differentiated through it.
Tensor unpack_output(const autograd::SavedVariable& saved, autograd::Node& node);
// Saves a (non-output) input; when it shares memory with `self` (about to be written by an
// in-place op) a copy is saved instead.
autograd::SavedVariable save_input(const Tensor& t, const Tensor* self = nullptr);

}  // namespace dp::ops
