// Module hooks: the registry, the runners with their checks and error context, and the two identity
// nodes of full backward hooks (PyTorch's torch.utils.hooks.BackwardHook; see dp/nn/hooks.h).
#include <algorithm>
#include <exception>
#include "dp/autograd/function.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/pooled.h"
#include "dp/nn/module.h"
#include "dp/ops/factory.h"

namespace dp::nn {
namespace detail {

const char* hook_kind_name(HookKind kind) {
  switch (kind) {
    case HookKind::ForwardPre:
      return "forward pre-hook";
    case HookKind::Forward:
      return "forward hook";
    case HookKind::FullBackward:
      return "full backward hook";
    case HookKind::FullBackwardPre:
      return "full backward pre-hook";
  }
  return "hook";
}

// ---------------------------------------------------------------- registry

uint64_t HookRegistry::add(HookKind kind, HookFn fn, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  std::string label(1, '#');
  label.append(std::to_string(id));
  if (!name.empty()) label.append(" ('").append(name).append("')");
  lists_[static_cast<size_t>(kind)].push_back(std::make_shared<const HookEntry>(HookEntry{id, std::move(label), std::move(fn)}));
  count_.fetch_add(1, std::memory_order_release);
  return id;
}

void HookRegistry::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (HookList& list : lists_) {
    auto it = std::find_if(list.begin(), list.end(), [id](const auto& e) { return e->id == id; });
    if (it == list.end()) continue;
    list.erase(it);  // a running call holds its own snapshot (shared_ptr): erasing here is safe
    count_.fetch_sub(1, std::memory_order_release);
    return;
  }
}

HookSnapshot HookRegistry::snapshot() const {
  HookSnapshot s;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k = 0; k < kHookKinds; ++k) s.lists[k] = lists_[k];
  return s;
}

std::shared_ptr<HookRegistry> HookRegistry::copy() const {
  auto out = std::make_shared<HookRegistry>();
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k = 0; k < kHookKinds; ++k) out->lists_[k] = lists_[k];
  out->next_id_ = next_id_;
  out->count_.store(count_.load(std::memory_order_acquire), std::memory_order_release);
  return out;
}

// ---------------------------------------------------------------- running hooks

namespace {

std::string where(HookKind kind, const HookEntry& e, const Module& m) {
  return ::dp::detail::str("in ", hook_kind_name(kind), " ", e.label, " of ", m.name());
}

// Runs one hook; an exception leaves with its type kept and the hook and module named.
std::optional<TensorList> invoke(HookKind kind, const HookEntry& e, Module& m, const TensorList& a, const TensorList& b) {
  try {
    return e.fn(m, a, b);
  } catch (...) {
    ::dp::detail::rethrow_with_context(std::current_exception(), where(kind, e, m));
  }
}

// A forward (pre-)hook's replacement: as many tensors as it was given, all defined (the call puts
// them back where the originals were found).
void check_replacement(HookKind kind, const HookEntry& e, const Module& m, const TensorList& got, size_t expected, const char* what) {
  DP_CHECK(got.size() == expected, ValueError, hook_kind_name(kind), " ", e.label, " of ", m.name(), " returned ", got.size(), " ", what,
           " but the call has ", expected, " (a hook replaces the tensors it was given one for one; return std::nullopt to keep them)");
  for (size_t i = 0; i < got.size(); ++i)
    DP_CHECK(got[i].defined(), ValueError, hook_kind_name(kind), " ", e.label, " of ", m.name(), " returned an undefined tensor at position ", i,
             " of its ", what, " (return std::nullopt to keep them)");
}

// An alias of t (same storage, sizes, strides): the identity output of a hook node.
Tensor alias_of(const Tensor& t) {
  const TensorImpl& o = *t.unsafe_impl();
  return Tensor(::dp::detail::make_pooled<TensorImpl>(o.storage, o.sizes, o.strides, o.offset, o.dtype));
}

}  // namespace

TensorList run_forward_pre_hooks(Module& m, const HookList& hooks, TensorList inputs) {
  for (const auto& h : hooks) {
    std::optional<TensorList> r = invoke(HookKind::ForwardPre, *h, m, inputs, {});
    if (!r) continue;
    check_replacement(HookKind::ForwardPre, *h, m, *r, inputs.size(), "input tensors");
    inputs = std::move(*r);
  }
  return inputs;
}

TensorList run_forward_hooks(Module& m, const HookList& hooks, const TensorList& inputs, TensorList outputs) {
  for (const auto& h : hooks) {
    std::optional<TensorList> r = invoke(HookKind::Forward, *h, m, inputs, outputs);
    if (!r) continue;
    check_replacement(HookKind::Forward, *h, m, *r, outputs.size(), "output tensors");
    outputs = std::move(*r);
  }
  return outputs;
}

[[noreturn]] void throw_single_output_hook_mismatch(const Module& m, size_t outputs) {
  throw ValueError(::dp::detail::str("forward hook of ", m.name(), ": the hook takes one output tensor (const Tensor&) but forward returned ",
                                     outputs, " tensors; take `const dp::nn::TensorList& outputs` instead"));
}

[[noreturn]] void throw_unhookable_call(const Module& m) {
  throw NotImplementedError(::dp::detail::str("calling ", m.name(),
                                              " with hooks registered: its forward can't be called with copies of these "
                                              "arguments (non-copyable, or taken as rvalue references), which hooks need to replace their tensors; "
                                              "take the arguments by value or const reference"));
}

// ---------------------------------------------------------------- full backward hooks

// One forward call's link between its output node (which sees grad_output first) and its input
// node (which sees grad_input and calls the hooks), as BackwardHook's fields in PyTorch.
class BackwardHookState : public std::enable_shared_from_this<BackwardHookState> {
 public:
  BackwardHookState(Module& m, const HookSnapshot& hooks)
      : keep_(m.weak_from_this().lock()), module_(&m), hooks_(hooks[HookKind::FullBackward]), pre_hooks_(hooks[HookKind::FullBackwardPre]) {}

  void wire_inputs(TensorList& inputs) {
    n_inputs_ = inputs.size();
    TensorList sources, aliases;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      input_specs_.push_back({t.sizes(), t.dtype(), t.device()});
      if (!t.requires_grad()) continue;
      input_pos_.push_back(i);
      sources.push_back(t);
      aliases.push_back(alias_of(t));
    }
    if (sources.empty()) return;
    auto self = shared_from_this();
    autograd::record("BackwardHookFunctionBackward", sources, aliases,
                     [self](autograd::variable_list&& grads) { return self->input_backward(std::move(grads)); });
    for (size_t k = 0; k < input_pos_.size(); ++k) inputs[input_pos_[k]] = aliases[k];
    inputs_hooked_ = true;
  }

  void wire_outputs(TensorList& outputs) {
    n_outputs_ = outputs.size();
    TensorList sources, aliases;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].requires_grad()) continue;
      output_pos_.push_back(i);
      sources.push_back(outputs[i]);
      aliases.push_back(alias_of(outputs[i]));
    }
    if (sources.empty()) return;  // no gradient will reach this module: its backward hooks never fire
    auto self = shared_from_this();
    std::shared_ptr<autograd::Node> node =
        autograd::record("BackwardHookFunctionBackward", sources, aliases,
                         [self](autograd::variable_list&& grads) { return self->output_backward(std::move(grads)); });
    node->materialize_grads = false;  // an output that got no gradient shows as undefined in grad_output
    for (size_t k = 0; k < output_pos_.size(); ++k) outputs[output_pos_[k]] = aliases[k];
  }

 private:
  // Gradients w.r.t. the module's outputs (those that require grad).
  autograd::variable_list output_backward(autograd::variable_list&& grads) {
    TensorList grad_output(n_outputs_);
    for (size_t k = 0; k < output_pos_.size(); ++k) grad_output[output_pos_[k]] = grads[k];
    for (const auto& h : pre_hooks_) {
      std::optional<TensorList> r = invoke(HookKind::FullBackwardPre, *h, *module_, grad_output, {});
      if (!r) continue;
      DP_CHECK(r->size() == n_outputs_, ValueError, "full backward pre-hook ", h->label, " of ", module_->name(), " returned ", r->size(),
               " grad_output tensors but the module has ", n_outputs_, " output tensors");
      grad_output = std::move(*r);
    }
    if (inputs_hooked_) {
      std::lock_guard<std::mutex> lock(mu_);
      grad_output_ = grad_output;
    } else {
      // No input requires grad: no input node will run, so the hooks run here with every
      // grad_input undefined, and may not return gradients (PyTorch's rule).
      const TensorList grad_input(n_inputs_);
      for (const auto& h : hooks_) {
        std::optional<TensorList> r = invoke(HookKind::FullBackward, *h, *module_, grad_input, grad_output);
        if (!r) continue;
        for (const Tensor& g : *r)
          DP_CHECK(!g.defined(), AutogradError, "full backward hook ", h->label, " of ", module_->name(),
                   ": backward hook for Modules where no input requires gradient should always return None or None for all gradients "
                   "(return std::nullopt or undefined tensors)");
      }
    }
    autograd::variable_list out(output_pos_.size());
    for (size_t k = 0; k < output_pos_.size(); ++k) out[k] = grad_output[output_pos_[k]];
    return out;
  }

  // Gradients w.r.t. the module's inputs that require grad (zeros where none arrived).
  autograd::variable_list input_backward(autograd::variable_list&& grads) {
    std::optional<TensorList> grad_output;
    {
      std::lock_guard<std::mutex> lock(mu_);
      grad_output.swap(grad_output_);  // once per backward: consumed here
    }
    // No grad_output: the gradient reached the inputs without passing through the outputs (double
    // backward, say); PyTorch calls no hook then.
    if (!grad_output) return std::move(grads);
    TensorList grad_input(n_inputs_);
    std::vector<bool> has_grad(n_inputs_, false);
    for (size_t k = 0; k < input_pos_.size(); ++k) {
      grad_input[input_pos_[k]] = grads[k];
      has_grad[input_pos_[k]] = true;
    }
    for (size_t i = 0; i < n_inputs_; ++i) {
      if (has_grad[i]) continue;
      // PyTorch passes every tensor input through its identity function, so an input that does not
      // require grad shows a materialised zero gradient.
      const autograd::TensorMeta& s = input_specs_[i];
      grad_input[i] = zeros(s.sizes, TensorOptions().dtype(s.dtype).device(s.device));
    }
    for (const auto& h : hooks_) {
      std::optional<TensorList> r = invoke(HookKind::FullBackward, *h, *module_, grad_input, *grad_output);
      if (!r) continue;
      DP_CHECK(r->size() == n_inputs_, ValueError, "full backward hook ", h->label, " of ", module_->name(),
               ": backward hook returned an invalid number of grad_input, got ", r->size(), ", but expected ", n_inputs_);
      grad_input = std::move(*r);
    }
    autograd::variable_list out(input_pos_.size());
    for (size_t k = 0; k < input_pos_.size(); ++k) out[k] = grad_input[input_pos_[k]];
    return out;
  }

  ModulePtr keep_;  // the module outlives the graph that calls its hooks (as PyTorch's BackwardHook.module)
  Module* module_;
  HookList hooks_, pre_hooks_;
  size_t n_inputs_ = 0, n_outputs_ = 0;
  std::vector<size_t> input_pos_, output_pos_;
  std::vector<autograd::TensorMeta> input_specs_;
  bool inputs_hooked_ = false;
  std::mutex mu_;
  std::optional<TensorList> grad_output_;
};

std::shared_ptr<BackwardHookState> setup_backward_hook_inputs(Module& m, const HookSnapshot& hooks, TensorList& inputs) {
  if (hooks[HookKind::FullBackward].empty() && hooks[HookKind::FullBackwardPre].empty()) return nullptr;
  if (!GradMode::is_enabled()) return nullptr;  // nothing can flow back: no hook will fire
  auto state = std::make_shared<BackwardHookState>(m, hooks);
  state->wire_inputs(inputs);
  return state;
}

void setup_backward_hook_outputs(const std::shared_ptr<BackwardHookState>& state, TensorList& outputs) { state->wire_outputs(outputs); }

}  // namespace detail

// ---------------------------------------------------------------- Module, handle

RemovableHandle Module::add_hook(detail::HookKind kind, detail::HookFn fn, const std::string& name) {
  const uint64_t id = hooks_->add(kind, std::move(fn), name);
  return RemovableHandle(hooks_, id);
}

void RemovableHandle::remove() {
  if (auto registry = registry_.lock()) registry->remove(id_);
}

}  // namespace dp::nn
