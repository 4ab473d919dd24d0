// Tensor metadata and autograd accessors (what needs autograd's code goes through
// core/autograd_hooks.h).
#include "core/autograd_hooks.h"
#include "dp/core/pooled.h"
#include "dp/core/tensor.h"

namespace dp {

void Tensor::throw_undefined() { throw ValueError("operation on an undefined tensor (default-constructed dp::Tensor)"); }

int64_t Tensor::size(int64_t d) const {
  if (dim() == 0) DP_CHECK(false, IndexError, "size(", d, "): dimension specified as ", d, " but tensor has no dimensions");
  return impl().sizes[wrap_dim(d, dim(), "size")];
}

int64_t Tensor::stride(int64_t d) const {
  if (dim() == 0) DP_CHECK(false, IndexError, "stride(", d, "): dimension specified as ", d, " but tensor has no dimensions");
  return impl().strides[wrap_dim(d, dim(), "stride")];
}

void* Tensor::data_ptr() const {
  const TensorImpl& i = impl();
  if (!i.storage->data()) return nullptr;
  return static_cast<char*>(i.storage->data()) + i.offset * static_cast<int64_t>(dp::element_size(i.dtype));
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return detail::str(legacy_type_name(dtype()), " ", size_str(), " on ", device().str());
}

// ---- autograd ----

bool Tensor::requires_grad() const {
  const TensorImpl& i = impl();
  return i.autograd && (i.autograd->requires_grad || i.autograd->grad_fn);
}

Tensor& Tensor::requires_grad_(bool on) {
  TensorImpl& i = impl();
  DP_CHECK(is_leaf(), AutogradError,
           "you can only change requires_grad flags of leaf variables. If you want to use a computed variable in a subgraph that doesn't require "
           "differentiation use var_no_grad = var.detach().");
  DP_CHECK(!on || dp::is_floating_point(dtype()), AutogradError, "only Tensors of floating point dtype can require gradients (got ",
           dtype_name(dtype()), ")");
  if (!on && !i.autograd) return *this;
  i.autograd_meta().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  const TensorImpl& i = impl();
  return !i.autograd || !i.autograd->grad_fn;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  const TensorImpl& i = impl();
  return i.autograd ? i.autograd->grad_fn : none;
}

uint32_t Tensor::output_nr() const {
  const TensorImpl& i = impl();
  return i.autograd ? i.autograd->output_nr : 0;
}

Tensor Tensor::grad() const {
  TensorImpl& i = impl();
  if (!i.autograd) return Tensor();
  std::lock_guard<std::mutex> lock(i.autograd->mu);
  return i.autograd->grad ? *i.autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  TensorImpl& i = impl();
  if (g.defined()) {
    DP_CHECK(g.sizes() == sizes(), ShapeError, "assigned grad has data of a different size: ", g.size_str(), " vs ", size_str());
    DP_CHECK(g.dtype() == dtype(), DTypeError, "assigned grad has data of a different type: ", dtype_name(g.dtype()), " vs ", dtype_name(dtype()));
    DP_CHECK(g.device() == device(), DeviceError, "assigned grad has data located on a different device: ", g.device().str(), " vs ", device().str());
  }
  AutogradMeta& m = i.autograd_meta();
  std::lock_guard<std::mutex> lock(m.mu);
  if (g.defined())
    m.grad = std::make_shared<Tensor>(g);
  else
    m.grad.reset();
}

Tensor& Tensor::mutable_grad() {
  AutogradMeta& m = impl().autograd_meta();
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.grad) m.grad = std::make_shared<Tensor>();
  return *m.grad;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  detail::autograd_hooks().backward(*this, gradient, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl& i = impl();
  return Tensor(::dp::detail::make_pooled<TensorImpl>(i.storage, i.sizes, i.strides, i.offset, i.dtype));
}

Tensor& Tensor::detach_() {
  TensorImpl& i = impl();
  if (i.autograd) {
    i.autograd->grad_fn.reset();
    i.autograd->requires_grad = false;
    i.autograd->output_nr = 0;
  }
  return *this;
}

void Tensor::set_data(const Tensor& data) {
  DP_CHECK(data.defined(), ValueError, "set_data: the new data is an undefined tensor");
  TensorImpl& i = impl();
  const TensorImpl& d = *data.unsafe_impl();
  if (&i == &d) return;
  // A leaf's AccumulateGrad describes the gradient it takes (dtype, device) and is reused by every
  // graph while one holds it. When the data moves to another device or dtype, forget it (as
  // PyTorch's set_data does), so that the next graph makes one for the new data; a graph made
  // before keeps its own and still delivers gradients as they were (on the old device). Without
  // this, backward through a new graph fails with "invalid gradient ... expected device <old>".
  std::shared_ptr<autograd::Node> stale;  // released after the lock: dropping it may free a node
  if (i.autograd) {
    std::lock_guard<std::mutex> lock(i.autograd->mu);
    if (auto acc = i.autograd->grad_accumulator.lock()) {
      if (!detail::autograd_hooks().accumulator_matches(*acc, d.device(), d.dtype)) {
        i.autograd->grad_accumulator.reset();
        stale = std::move(acc);
      }
    }
  }
  i.storage = d.storage;
  i.sizes = d.sizes;
  i.strides = d.strides;
  i.offset = d.offset;
  i.dtype = d.dtype;
  i.refresh_metadata();
}

bool Tensor::retains_grad() const {
  const TensorImpl& i = impl();
  return i.autograd && i.autograd->retains_grad;
}

void Tensor::retain_grad() {
  DP_CHECK(requires_grad(), AutogradError, "can't retain_grad on Tensor that has requires_grad=False");
  if (is_leaf() || retains_grad()) return;
  AutogradMeta& m = impl().autograd_meta();
  m.retains_grad = true;
  // A weak reference: the hook lives in the graph, which must not keep the tensor alive.
  std::weak_ptr<TensorImpl> weak = impl_;
  detail::autograd_hooks().add_output_hook(*m.grad_fn, detail::kRetainGradHookId, m.output_nr, [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      // A fresh tensor either way: the retained .grad never aliases g.
      AutogradMeta& meta = impl->autograd_meta();
      std::lock_guard<std::mutex> l(meta.mu);
      if (!meta.grad || !meta.grad->defined())
        meta.grad = std::make_shared<Tensor>(g.detach().clone());
      else
        meta.grad = std::make_shared<Tensor>(meta.grad->add(g.detach()));
    }
    return Tensor();
  });
}

int Tensor::register_hook(TensorHook hook) {
  DP_CHECK(requires_grad(), AutogradError, "cannot register a hook on a tensor that doesn't require gradient");
  AutogradMeta& m = impl().autograd_meta();
  int id;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    id = m.next_hook_id++;
  }
  if (is_leaf()) {
    std::lock_guard<std::mutex> lock(m.mu);
    m.hooks.emplace_back(id, std::move(hook));
  } else {
    detail::autograd_hooks().add_output_hook(*m.grad_fn, id, m.output_nr, std::move(hook));
  }
  return id;
}

void Tensor::remove_hook(int handle) {
  AutogradMeta& m = impl().autograd_meta();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    std::erase_if(m.hooks, [&](auto& h) { return h.first == handle; });
    std::erase_if(m.post_accumulate_hooks, [&](auto& h) { return h.first == handle; });
  }
  // Handles are per tensor: another output of the same node may use the same number.
  if (m.grad_fn && handle != detail::kRetainGradHookId) detail::autograd_hooks().remove_output_hooks(*m.grad_fn, handle, m.output_nr);
}

int Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) {
  DP_CHECK(is_leaf() && requires_grad(), AutogradError,
           "post accumulate grad hooks cannot be registered on non-leaf tensors or tensors that don't require grad");
  AutogradMeta& m = impl().autograd_meta();
  std::lock_guard<std::mutex> lock(m.mu);
  int id = m.next_hook_id++;
  m.post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

}  // namespace dp
