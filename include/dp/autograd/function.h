#pragma once
// Helpers for writing differentiable ops:
//
//   Tensor exp(const Tensor& a) {
//     Tensor out = backend::exp(a);                      // no autograd inside kernels
//     if (autograd::needs_grad(a)) {
//       autograd::SavedVariable saved(out, /*is_output=*/true);
//       autograd::record("ExpBackward0", {a}, {out}, [saved](autograd::variable_list&& g) {
//         return autograd::variable_list{g[0] * saved.unpack()};
//       });
//     }
//     return out;
//   }
//
// The backward callable receives one gradient per output and returns one per input (undefined
// for inputs that need none), each with that input's shape and device (the engine checks and
// reports a mismatch with the node's name; a different dtype is converted). It is run with grad
// mode = create_graph, so backward formulas written with dp ops are themselves differentiable;
// under create_graph, saved.unpack() of a saved output returns it with its history (this node), so
// formulas that use the op's own output differentiate correctly a second time.
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>
#include "dp/autograd/grad_mode.h"
#include "dp/autograd/node.h"
#include "dp/autograd/saved_variable.h"

namespace dp::autograd {

inline bool needs_grad(const Tensor& a) { return GradMode::is_enabled() && a.defined() && a.requires_grad(); }
template <typename... Ts>
bool needs_grad(const Tensor& a, const Ts&... rest) {
  if (!GradMode::is_enabled()) return false;
  return (a.defined() && a.requires_grad()) || ((rest.defined() && rest.requires_grad()) || ...);
}
bool any_needs_grad(const std::vector<Tensor>& ts);

// Creates a FunctionNode with edges to `inputs` and makes it the grad_fn of every output
// (output i gets output_nr i). Outputs must be fresh tensors made by the op. Returns the node.
std::shared_ptr<Node> record(std::string name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                             FunctionNode::BackwardFn backward);
// The same for the usual call, `record("ExpBackward0", {a}, {out}, fn)`: a literal name (kept as a
// pointer: it must outlive the node) and braced lists, so recording allocates no vectors or strings.
std::shared_ptr<Node> record(const char* static_name, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
                             FunctionNode::BackwardFn backward);
std::shared_ptr<Node> record(const char* static_name, std::initializer_list<Tensor> inputs, const std::vector<Tensor>& outputs,
                             FunctionNode::BackwardFn backward);
// Connects `node` (edges already set) as grad_fn of the outputs.
void set_history(const std::vector<Tensor>& outputs, const std::shared_ptr<Node>& node);
void set_history(std::initializer_list<Tensor> outputs, const std::shared_ptr<Node>& node);
// Marks outputs of a view op (they alias their input): in-place ops on them are rejected while
// they require grad, since the base's gradient would not see the change.
void mark_view(const Tensor& view);
// For in-place ops on a tensor with history: its grad_fn becomes `node` (output 0).
void rebase_history(Tensor& self, const std::shared_ptr<Node>& node);
// Throws AutogradError if an in-place op on `self` is not allowed (a leaf that requires grad with
// grad mode on, or a view of such a leaf). `op` names the op in the message.
void check_inplace(const Tensor& self, const char* op);

}  // namespace dp::autograd
