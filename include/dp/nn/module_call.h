#pragma once
// nn::call(module, args...): calls a module the way PyTorch's Module.__call__ does, running its
// hooks (dp/nn/hooks.h) around forward(args...). ModuleHolder's operator() (`fc(x)`), Sequential
// and DataParallel's replicas go through it; module.forward(args...) called directly runs no hooks.
// With no hook registered it is forward(args...) plus one atomic load.
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>
#include "dp/nn/hooks.h"
#include "dp/nn/module.h"

namespace dp::nn {

namespace detail {

template <typename T>
struct hook_is_sequence : std::false_type {};
template <typename V, typename A>
struct hook_is_sequence<std::vector<V, A>> : std::true_type {};
template <typename V, size_t N>
struct hook_is_sequence<std::array<V, N>> : std::true_type {};
template <typename T>
struct hook_is_tuple : std::false_type {};
template <typename... Ts>
struct hook_is_tuple<std::tuple<Ts...>> : std::true_type {};
template <typename A, typename B>
struct hook_is_tuple<std::pair<A, B>> : std::true_type {};
template <typename T>
struct hook_is_map : std::false_type {};
template <typename K, typename V, typename C, typename A>
struct hook_is_map<std::map<K, V, C, A>> : std::true_type {};
template <typename K, typename V, typename H, typename E, typename A>
struct hook_is_map<std::unordered_map<K, V, H, E, A>> : std::true_type {};
template <typename T>
struct hook_is_optional : std::false_type {};
template <typename V>
struct hook_is_optional<std::optional<V>> : std::true_type {};

// Calls f(t) on every defined tensor inside v, by reference, in a fixed order. The same types as
// DataParallel's scatter (dp/parallel/scatter_gather.h) except Fields<T> specialisations; written
// here so that nn does not depend on the parallel layer.
template <typename T, typename F>
void for_each_hook_tensor(T& v, F& f) {
  using D = std::remove_const_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) {
    if (v.defined()) f(v);
  } else if constexpr (hook_is_sequence<D>::value) {
    for (auto&& e : v) for_each_hook_tensor(e, f);
  } else if constexpr (hook_is_tuple<D>::value) {
    std::apply([&](auto&... e) { (for_each_hook_tensor(e, f), ...); }, v);
  } else if constexpr (hook_is_map<D>::value) {
    for (auto& kv : v) for_each_hook_tensor(kv.second, f);
  } else if constexpr (hook_is_optional<D>::value) {
    if (v) for_each_hook_tensor(*v, f);
  } else if constexpr (requires(D & x) { x.dp_fields(); }) {
    auto fields = v.dp_fields();
    std::apply([&](auto&... e) { (for_each_hook_tensor(e, f), ...); }, fields);
  }
}

template <typename T>
TensorList hook_tensors_of(T& v) {
  TensorList out;
  auto add = [&out](const Tensor& t) { out.push_back(t); };
  for_each_hook_tensor(v, add);
  return out;
}

// Puts `ts` back in the places hook_tensors_of(v) found them (same count: the hook runner checks).
template <typename T>
void hook_assign_tensors(T& v, const TensorList& ts) {
  size_t i = 0;
  auto put = [&](auto& t) {
    if constexpr (!std::is_const_v<std::remove_reference_t<decltype(t)>>) t = ts[i];
    ++i;
  };
  for_each_hook_tensor(v, put);
}

// The non-template halves (src/nn/module_hooks.cpp).
TensorList run_forward_pre_hooks(Module& m, const HookList& hooks, TensorList inputs);
TensorList run_forward_hooks(Module& m, const HookList& hooks, const TensorList& inputs, TensorList outputs);
class BackwardHookState;
// With full backward hooks (or pre-hooks) registered, grad mode on and an input or output that
// requires grad: the state that links the two identity nodes; the inputs that require grad are
// replaced by aliases whose grad_fn is the input node. Null otherwise (no hook will fire).
std::shared_ptr<BackwardHookState> setup_backward_hook_inputs(Module& m, const HookSnapshot& hooks, TensorList& inputs);
// Replaces the outputs that require grad by aliases whose grad_fn is the output node.
void setup_backward_hook_outputs(const std::shared_ptr<BackwardHookState>& state, TensorList& outputs);

// Whether hooks can wrap forward(args...): call_with_hooks copies the arguments (a pre-hook may
// replace their tensors) and calls forward with the copies as lvalues, as parallel_apply does.
template <typename M, typename R, typename... Args>
concept hookable_call = (std::is_copy_constructible_v<std::decay_t<Args>> && ...) && requires(M& m, std::decay_t<Args>&... a) {
  {m.forward(a...)};
  requires std::is_same_v<std::decay_t<decltype(m.forward(a...))>, R>;
};
[[noreturn]] void throw_unhookable_call(const Module& m);

template <typename R, typename M, typename... Args>
R call_with_hooks(M& module, Args&&... args) {
  Module& base = module;
  const HookSnapshot hooks = base.hook_snapshot();
  std::tuple<std::decay_t<Args>...> in(std::forward<Args>(args)...);
  TensorList inputs = hook_tensors_of(in);
  if (!hooks[HookKind::ForwardPre].empty()) {
    inputs = run_forward_pre_hooks(base, hooks[HookKind::ForwardPre], std::move(inputs));
    hook_assign_tensors(in, inputs);
  }
  std::shared_ptr<BackwardHookState> backward = setup_backward_hook_inputs(base, hooks, inputs);
  if (backward) hook_assign_tensors(in, inputs);
  if constexpr (std::is_void_v<R>) {
    std::apply([&](auto&... a) { module.forward(a...); }, in);
    if (!hooks[HookKind::Forward].empty()) run_forward_hooks(base, hooks[HookKind::Forward], inputs, {});
  } else {
    R out = std::apply([&](auto&... a) -> R { return module.forward(a...); }, in);
    if (!hooks[HookKind::Forward].empty() || backward) {
      TensorList outputs = hook_tensors_of(out);
      if (!hooks[HookKind::Forward].empty()) {
        outputs = run_forward_hooks(base, hooks[HookKind::Forward], inputs, std::move(outputs));
        hook_assign_tensors(out, outputs);
      }
      if (backward) {
        setup_backward_hook_outputs(backward, outputs);
        hook_assign_tensors(out, outputs);
      }
    }
    return out;
  }
}

}  // namespace detail

// module(args...) with hooks: forward pre-hooks, forward, forward hooks, backward hook wiring.
template <typename M, typename... Args>
requires(!std::is_const_v<M>) auto call(M& module, Args&&... args) -> std::decay_t<decltype(module.forward(std::forward<Args>(args)...))> {
  using R = std::decay_t<decltype(module.forward(std::forward<Args>(args)...))>;
  if constexpr (std::is_base_of_v<Module, M>) {
    if (static_cast<const Module&>(module).has_hooks()) [[unlikely]] {
      if constexpr (detail::hookable_call<M, R, Args...>)
        return detail::call_with_hooks<R>(module, std::forward<Args>(args)...);
      else
        detail::throw_unhookable_call(module);
    }
  }
  return module.forward(std::forward<Args>(args)...);
}

}  // namespace dp::nn
