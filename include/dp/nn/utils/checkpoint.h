#pragma once
// Activation checkpointing (torch.utils.checkpoint): trade compute for memory by not keeping a
// segment's activations for backward, recomputing them there instead.
//
//   dp::Tensor h = dp::utils::checkpoint([&](const dp::Tensor& x) { return block(x); }, x);
//   dp::Tensor y = dp::utils::checkpoint_sequential(seq, /*segments=*/2, x);
//
// fn is any callable; the tensors among `args` are the segment's inputs (gradients flow back to
// those that require grad), anything else is passed through as is (kept by value until backward).
// fn returns a Tensor, a std::vector<Tensor> or a std::tuple of Tensors; checkpoint returns the same.
//
// Forward runs fn, keeps its tensor inputs, and drops every activation fn made once it returns.
// Backward recomputes fn (grad enabled, autocast as in forward, and with preserve_rng_state the
// random state of the inputs' devices as it was, so dropout draws the same masks) and evaluates the
// recomputed segment's backward down to its inputs and to the parameters it used (and any other
// tensor with history it reached), without writing .grad: those gradients leave the checkpoint's
// node as its own, so each parameter's gradient reaches its AccumulateGrad once per pass, summed
// with its other uses. Hence DistributedDataParallel reduces a checkpointed parameter once, after
// its last use, and autograd::grad() through a checkpoint works.
//
// Differences from PyTorch: one implementation (like use_reentrant=False in what it supports:
// autograd::grad, inputs that do not require grad, parameters found automatically; like the
// reentrant form in that a segment is recomputed whole). fn must be deterministic apart from the
// random numbers of its inputs' devices: a recomputation that reaches a tensor the forward did not
// is an error. Random numbers drawn on other devices than the inputs' are not replayed.
// A tensor input modified in place between forward and backward is an error (as PyTorch's saved
// tensor check).
#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include "dp/core/tensor.h"
#include "dp/nn/modules/container.h"

namespace dp::utils {

struct CheckpointOptions {
  // Replay the random numbers of the inputs' devices in the recomputation (PyTorch's default).
  CheckpointOptions& preserve_rng_state(bool v) {
    preserve_rng_state_ = v;
    return *this;
  }
  bool preserve_rng_state() const { return preserve_rng_state_; }

 private:
  bool preserve_rng_state_ = true;
};

namespace detail {
using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
// The untyped core: runs fn(inputs) checkpointed and returns its outputs.
std::vector<Tensor> checkpoint_impl(SegmentFn fn, const std::vector<Tensor>& inputs, const CheckpointOptions& options);

template <typename T>
inline constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, Tensor>;

template <typename R>
struct Outputs;
template <>
struct Outputs<Tensor> {
  static std::vector<Tensor> to(Tensor t) { return {std::move(t)}; }
  static Tensor from(std::vector<Tensor>&& v) { return std::move(v[0]); }
};
template <>
struct Outputs<std::vector<Tensor>> {
  static std::vector<Tensor> to(std::vector<Tensor> v) { return v; }
  static std::vector<Tensor> from(std::vector<Tensor>&& v) { return std::move(v); }
};
template <typename... Ts>
struct Outputs<std::tuple<Ts...>> {
  static_assert((is_tensor_v<Ts> && ...), "dp::utils::checkpoint: fn may return a std::tuple of Tensors only");
  static std::vector<Tensor> to(std::tuple<Ts...> t) {
    return std::apply([](auto&... x) { return std::vector<Tensor>{std::move(x)...}; }, t);
  }
  static std::tuple<Ts...> from(std::vector<Tensor>&& v) { return from(std::move(v), std::index_sequence_for<Ts...>{}); }
  template <size_t... I>
  static std::tuple<Ts...> from(std::vector<Tensor>&& v, std::index_sequence<I...>) {
    return std::tuple<Ts...>{std::move(v[I])...};
  }
};

// The argument the recomputation passes for a kept one: the next segment tensor for a Tensor,
// the kept value itself otherwise.
template <typename A>
using arg_t = std::conditional_t<is_tensor_v<A>, Tensor, A&>;
template <typename A>
arg_t<A> pick(A& kept, const std::vector<Tensor>& tensors, size_t& k) {
  if constexpr (is_tensor_v<A>)
    return tensors[k++];
  else
    return kept;
}
}  // namespace detail

// Runs fn(args...) without keeping its activations; see above.
template <typename Fn, typename... Args>
auto checkpoint(const CheckpointOptions& options, Fn&& fn, Args&&... args) {
  using F = std::decay_t<Fn>;
  using Result = std::decay_t<std::invoke_result_t<F&, detail::arg_t<std::decay_t<Args>>...>>;
  std::vector<Tensor> inputs;
  auto collect = [&inputs](const auto& a) {
    if constexpr (detail::is_tensor_v<decltype(a)>) inputs.push_back(a);
  };
  (collect(args), ...);
  detail::SegmentFn segment = [f = F(std::forward<Fn>(fn)),
                               kept = std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...)](const std::vector<Tensor>& tensors) mutable {
    size_t k = 0;
    // Braced initialisation: the arguments are picked left to right.
    auto call = std::apply(
        [&](auto&... a) { return std::tuple<detail::arg_t<std::remove_reference_t<decltype(a)>>...>{detail::pick(a, tensors, k)...}; }, kept);
    return detail::Outputs<Result>::to(std::apply(f, call));
  };
  return detail::Outputs<Result>::from(detail::checkpoint_impl(std::move(segment), inputs, options));
}

template <typename Fn, typename... Args>
requires(!std::is_same_v<std::decay_t<Fn>, CheckpointOptions>) auto checkpoint(Fn&& fn, Args&&... args) {
  return checkpoint(CheckpointOptions(), std::forward<Fn>(fn), std::forward<Args>(args)...);
}

// torch.utils.checkpoint.checkpoint_sequential: splits the Sequential's children into `segments`
// runs of size()/segments (the last takes the rest) and checkpoints every run but the last, which
// runs normally (its activations are needed right away by backward anyway).
Tensor checkpoint_sequential(const nn::Sequential& sequential, int64_t segments, const Tensor& input, const CheckpointOptions& options = {});

}  // namespace dp::utils
