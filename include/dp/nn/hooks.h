#pragma once
// Module hooks, with PyTorch's semantics (torch.nn.Module.register_*_hook):
//
//   auto h = model->register_forward_hook([](Module& m, const TensorList& in, const Tensor& out) {
//     std::cout << m.name() << " -> " << out.size_str() << "\n";       // return nothing: keep out
//   });
//   ...
//   h.remove();
//
// The hooks run when the module is *called*: `fc(x)` on a ModuleHolder, nn::call(module, x...)
// (dp/nn/module_call.h), a child inside Sequential, and DataParallel's replicas. Calling
// module->forward(x) directly bypasses them, as module.forward(x) does in PyTorch.
//
// Tensors, not Python tuples: a hook sees `inputs` as the defined tensors found in the call's
// arguments, in order (a Tensor, and the tensors inside std::vector / std::array / std::tuple /
// std::pair / std::optional / map values / DP_FIELDS structs, recursively), and `outputs` as the
// tensors found the same way in forward's result. A hook that returns a list replaces those
// tensors one for one: it must return as many tensors as it got, all defined. Returning nothing
// (void or std::nullopt) keeps them.
//
//   forward pre-hook   (Module&, inputs)               -> void | optional<TensorList>  (new inputs)
//   forward hook       (Module&, inputs, outputs)      -> void | optional<TensorList>  (new outputs)
//                      (Module&, inputs, const Tensor&) -> void | optional<Tensor> | Tensor
//                      (the last form for a forward that returns one tensor; an undefined Tensor keeps it)
//   full backward hook (Module&, grad_input, grad_output) -> void | optional<TensorList> (new grad_input)
//   full backward pre-hook (Module&, grad_output)      -> void | optional<TensorList>  (new grad_output)
//
// Order and removal: hooks of one kind run in registration order. Each call (forward) takes a
// snapshot of the registered hooks first, so a hook registered or removed while a call runs takes
// effect from the next call, and removal from inside a hook is safe. Backward hooks are the ones
// registered when the forward ran (PyTorch captures them at forward time too).
//
// Full backward hooks follow torch.utils.hooks.BackwardHook (PyTorch 1.13): when grad mode is on
// and some input requires grad, the inputs pass through an identity node ("BackwardHookFunctionBackward")
// before forward, and the outputs through another after the forward hooks. In backward, the
// output node records grad_output (undefined where an output received no gradient), then the
// input node calls the hooks with grad_input, once per backward:
//  - grad_input has one entry per input tensor; an input that does not require grad, or that no
//    gradient reached, gets zeros (PyTorch's materialised gradients). A returned list replaces the
//    gradients that flow on to the inputs (shapes and devices must match them).
//  - If no input requires grad, the hooks run at the output node with every grad_input undefined
//    and must return nothing (or only undefined tensors).
//  - If no output requires grad (or grad mode is off) nothing is set up and the hooks never run.
// Backward pre-hooks (PyTorch 2.0's register_full_backward_pre_hook) run at the output node before
// grad_output is recorded and may replace it.
//
// Threads: a hook runs in the thread that calls the module (under DataParallel: the replica's
// device worker, with the replica as `module`); backward hooks run where the autograd engine runs
// the hook nodes (the device of the module's first input or output, see docs/data-parallel.md).
// A hook that keeps state must make that state thread-safe if the module runs under DataParallel.
//
// Errors: an exception thrown by a hook is re-thrown with its type kept and the hook and module
// named ("Caught std::runtime_error in forward hook #0 of Linear.\nOriginal message: ...").
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#include "dp/core/errors.h"
#include "dp/core/tensor.h"

namespace dp::nn {

class Module;
using TensorList = std::vector<Tensor>;

namespace detail {

enum class HookKind { ForwardPre = 0, Forward = 1, FullBackward = 2, FullBackwardPre = 3 };
inline constexpr size_t kHookKinds = 4;
const char* hook_kind_name(HookKind kind);

// Every kind stored with one signature: (module, a, b); the pre-hook kinds ignore b.
using HookFn = std::function<std::optional<TensorList>(Module&, const TensorList&, const TensorList&)>;

struct HookEntry {
  uint64_t id;
  std::string label;  // "#3", or "#3 ('name')" when registered with a name
  HookFn fn;
};
using HookList = std::vector<std::shared_ptr<const HookEntry>>;

// The hooks of one kind at the moment a call started.
struct HookSnapshot {
  HookList lists[kHookKinds];
  const HookList& operator[](HookKind k) const { return lists[static_cast<size_t>(k)]; }
};

// A module's hooks. Shared between a module and its DataParallel replicas (PyTorch's replicas
// share the hook dicts of the original), copied by clone() (deepcopy copies them).
class HookRegistry {
 public:
  uint64_t add(HookKind kind, HookFn fn, const std::string& name);
  void remove(uint64_t id);
  HookSnapshot snapshot() const;
  std::shared_ptr<HookRegistry> copy() const;
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }

 private:
  mutable std::mutex mu_;
  HookList lists_[kHookKinds];
  uint64_t next_id_ = 0;
  std::atomic<size_t> count_{0};
};

template <typename R>
std::optional<TensorList> as_list_result(R&& r) {
  using D = std::decay_t<R>;
  if constexpr (std::is_same_v<D, std::optional<TensorList>>)
    return std::forward<R>(r);
  else if constexpr (std::is_same_v<D, TensorList>)
    return std::optional<TensorList>(std::forward<R>(r));
  else
    static_assert(sizeof(R) == 0, "a module hook must return void, std::optional<dp::nn::TensorList> or dp::nn::TensorList");
}

// Adapts a (Module&, const TensorList&) callable (pre-hooks).
template <typename F>
HookFn adapt_unary_hook(F&& f) {
  return [f = std::forward<F>(f)](Module& m, const TensorList& a, const TensorList&) mutable -> std::optional<TensorList> {
    using R = std::invoke_result_t<F&, Module&, const TensorList&>;
    if constexpr (std::is_void_v<R>) {
      f(m, a);
      return std::nullopt;
    } else {
      return as_list_result(f(m, a));
    }
  };
}

// Adapts a (Module&, const TensorList&, const TensorList&) callable (forward and backward hooks).
template <typename F>
HookFn adapt_binary_hook(F&& f) {
  return [f = std::forward<F>(f)](Module& m, const TensorList& a, const TensorList& b) mutable -> std::optional<TensorList> {
    using R = std::invoke_result_t<F&, Module&, const TensorList&, const TensorList&>;
    if constexpr (std::is_void_v<R>) {
      f(m, a, b);
      return std::nullopt;
    } else {
      return as_list_result(f(m, a, b));
    }
  };
}

// A forward hook written for one output tensor: (Module&, inputs, const Tensor& output).
[[noreturn]] void throw_single_output_hook_mismatch(const Module& m, size_t outputs);
template <typename F>
HookFn adapt_single_output_hook(F&& f) {
  return [f = std::forward<F>(f)](Module& m, const TensorList& in, const TensorList& out) mutable -> std::optional<TensorList> {
    if (out.size() != 1) throw_single_output_hook_mismatch(m, out.size());
    using R = std::invoke_result_t<F&, Module&, const TensorList&, const Tensor&>;
    if constexpr (std::is_void_v<R>) {
      f(m, in, out[0]);
      return std::nullopt;
    } else if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) {
      Tensor r = f(m, in, out[0]);
      if (!r.defined()) return std::nullopt;
      return TensorList{std::move(r)};
    } else {
      static_assert(std::is_same_v<std::decay_t<R>, std::optional<Tensor>>,
                    "a forward hook taking `const Tensor& output` must return void, dp::Tensor or std::optional<dp::Tensor>");
      std::optional<Tensor> r = f(m, in, out[0]);
      if (!r) return std::nullopt;
      return TensorList{std::move(*r)};
    }
  };
}

}  // namespace detail

// What register_*_hook returns (PyTorch's RemovableHandle). remove() unregisters the hook; it is
// idempotent, safe from any thread and from inside a running hook, and does nothing once the
// module is gone. Dropping the handle does not remove the hook.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  RemovableHandle(std::weak_ptr<detail::HookRegistry> registry, uint64_t id) : registry_(std::move(registry)), id_(id) {}
  void remove();
  uint64_t id() const { return id_; }

 private:
  std::weak_ptr<detail::HookRegistry> registry_;
  uint64_t id_ = 0;
};

}  // namespace dp::nn
