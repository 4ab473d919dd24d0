#include "dp/core/pooled.h"
#include "dp/autograd/function.h"

namespace dp::autograd {

bool any_needs_grad(const std::vector<Tensor>& ts) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {

void set_history_range(const Tensor* outputs, size_t n, const std::shared_ptr<Node>& node) {
  if (n > 0 && outputs[0].defined()) node->set_device(outputs[0].device());
  for (size_t i = 0; i < n; ++i) {
    const Tensor& out = outputs[i];
    uint32_t nr = node->add_output_meta(out);
    AutogradMeta& meta = out.unsafe_impl()->autograd_meta();
    meta.grad_fn = node;
    meta.output_nr = nr;
    meta.requires_grad = false;  // non-leaf: requires_grad() comes from grad_fn
  }
}

template <typename Name>
std::shared_ptr<Node> record_range(Name&& name, const Tensor* inputs, size_t num_inputs, const Tensor* outputs, size_t num_outputs,
                                   FunctionNode::BackwardFn&& backward) {
  auto node = ::dp::detail::make_pooled<FunctionNode>(std::forward<Name>(name), std::move(backward));
  node->reserve_next_edges(num_inputs);
  for (size_t i = 0; i < num_inputs; ++i) node->add_next_edge(gradient_edge(inputs[i]));
  set_history_range(outputs, num_outputs, node);
  return node;
}

}  // namespace

void set_history(const std::vector<Tensor>& outputs, const std::shared_ptr<Node>& node) { set_history_range(outputs.data(), outputs.size(), node); }

void set_history(std::initializer_list<Tensor> outputs, const std::shared_ptr<Node>& node) {
  set_history_range(outputs.begin(), outputs.size(), node);
}

std::shared_ptr<Node> record(std::string name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                             FunctionNode::BackwardFn backward) {
  return record_range(std::move(name), inputs.data(), inputs.size(), outputs.data(), outputs.size(), std::move(backward));
}

std::shared_ptr<Node> record(const char* static_name, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
                             FunctionNode::BackwardFn backward) {
  return record_range(static_name, inputs.begin(), inputs.size(), outputs.begin(), outputs.size(), std::move(backward));
}

std::shared_ptr<Node> record(const char* static_name, std::initializer_list<Tensor> inputs, const std::vector<Tensor>& outputs,
                             FunctionNode::BackwardFn backward) {
  return record_range(static_name, inputs.begin(), inputs.size(), outputs.data(), outputs.size(), std::move(backward));
}

void mark_view(const Tensor& view) { view.unsafe_impl()->autograd_meta().is_view = true; }

void rebase_history(Tensor& self, const std::shared_ptr<Node>& node) {
  AutogradMeta& meta = self.unsafe_impl()->autograd_meta();
  node->set_device(self.device());
  const uint32_t output_nr = node->add_output_meta(self);
  if (meta.retains_grad && meta.grad_fn) {
    // retain_grad follows the tensor: .grad must see the gradient of its new value (PyTorch moves
    // retains_grad hooks to the new grad_fn).
    for (Node::OutputHook& h : meta.grad_fn->remove_output_hooks(Node::kRetainGradHook, meta.output_nr)) {
      h.output_nr = output_nr;
      node->add_output_hook(std::move(h));
    }
  }
  meta.output_nr = output_nr;
  meta.grad_fn = node;
  meta.requires_grad = false;
}

void check_inplace(const Tensor& self, const char* op) {
  if (!GradMode::is_enabled() || !self.requires_grad()) return;
  DP_CHECK(!self.is_leaf(), AutogradError, op, ": a leaf Variable that requires grad is being used in an in-place operation.");
  const TensorImpl* impl = self.unsafe_impl();
  DP_CHECK(!(impl->autograd && impl->autograd->is_view), NotImplementedError, op,
           ": in-place operation on a view of a tensor that requires grad is not supported (the base's gradient would miss it); "
           "use the out-of-place form, e.g. y = y.",
           op, "(...) -> y = op(y, ...)");
}

}  // namespace dp::autograd
