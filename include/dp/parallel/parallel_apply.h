#pragma once
// parallel_apply(): runs replica i's forward on devices[i]'s worker thread, all at once.
//
//   auto outputs = dp::parallel::parallel_apply(replicas, inputs, devices);
//   // inputs[i] is replica i's argument tuple (scatter_args makes them); outputs[i] its result
//
// Each replica is called as module(args...) (nn::call), so the hooks it shares with the original
// run in the replica's thread. Each call runs with the caller's grad mode and autocast state (both
// are per thread). outputs[i]'s tensors are on devices[i]: a forward that returns a tensor
// elsewhere has it moved there, differentiably, as libtorch's parallel_apply does
// (module->forward(input).to(devices[i])); tensors are found in the output by the scatter/gather
// type rules (dp/parallel/scatter_gather.h), other members are left alone. Once every replica has
// finished, the first failure by replica index is re-thrown, its message prefixed with "Caught <type>
// in replica i on device d." (and how many others failed): a dp::Error of any subclass is the same
// object with that context added (Error::add_context), a standard exception is rebuilt as its
// standard type, anything else becomes a dp::Error. A forward that returns void gives no
// outputs.
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>
#include "dp/autograd/grad_mode.h"
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "dp/nn/module.h"
#include "dp/parallel/detail/run.h"
#include "dp/parallel/scatter_gather.h"

namespace dp::parallel {

namespace detail {
// Re-throws the first error (by index) of a parallel run, as described above; returns if none.
// notes[i], when given, is added to replica i's context (DataParallel: which rows of the batch it got).
void rethrow_first_replica_error(const std::vector<std::exception_ptr>& errors, const std::vector<Device>& devices,
                                 const std::vector<std::string>& notes = {});
// The workers of `devices` (null for the host, which runs in the calling thread).
std::vector<Worker*> workers_of(const std::vector<Device>& devices);
// run_on_workers over the workers of `devices`, where fn(i) on a CUDA device runs with the calling
// thread's current stream of that device current, so a replica's kernels queue behind the copies
// the caller made for it (the scatter), as PyTorch's parallel_apply passes its streams.
std::vector<std::exception_ptr> run_replicas(const std::vector<Device>& devices, const std::function<void(size_t)>& fn);

// parallel_apply with `notes` for the error context (see rethrow_first_replica_error).
template <typename M, typename... Args>
auto parallel_apply_noted(const std::vector<std::shared_ptr<M>>& replicas, const std::vector<std::tuple<Args...>>& inputs,
                          const std::vector<Device>& devices, const std::vector<std::string>& notes) {
  using R = std::decay_t<decltype(std::declval<M&>().forward(std::declval<Args&>()...))>;
  DP_CHECK(replicas.size() == inputs.size(), ValueError, "parallel_apply: the number of modules ", replicas.size(),
           " is not equal to the number of inputs ", inputs.size());
  DP_CHECK(replicas.size() == devices.size(), ValueError, "parallel_apply: the number of modules ", replicas.size(),
           " is not equal to the number of devices ", devices.size());
  for (size_t i = 0; i < replicas.size(); ++i) DP_CHECK(replicas[i] != nullptr, ValueError, "parallel_apply: module ", i, " is null");
  const bool grad_enabled = GradMode::is_enabled();
  auto call = [&](size_t i) -> decltype(auto) {
    AutoGradMode mode(grad_enabled);
    std::tuple<Args...> args = inputs[i];  // the replica's own copy: forward may take arguments by value or reference
    return std::apply([&](Args&... a) -> decltype(auto) { return nn::call(*replicas[i], a...); }, args);  // with its hooks
  };
  if constexpr (std::is_void_v<R>) {
    auto errors = run_replicas(devices, [&](size_t i) { call(i); });
    rethrow_first_replica_error(errors, devices, notes);
  } else {
    std::vector<std::optional<R>> results(replicas.size());
    auto errors = run_replicas(devices, [&](size_t i) {
      R out = call(i);
      AutoGradMode mode(grad_enabled);
      move_tensors_to(out, devices[i]);  // libtorch's rule: outputs[i] on devices[i]
      results[i].emplace(std::move(out));
    });
    rethrow_first_replica_error(errors, devices, notes);
    std::vector<R> out;
    out.reserve(results.size());
    for (auto& r : results) out.push_back(std::move(*r));
    return out;
  }
}
}  // namespace detail

template <typename M, typename... Args>
auto parallel_apply(const std::vector<std::shared_ptr<M>>& replicas, const std::vector<std::tuple<Args...>>& inputs,
                    const std::vector<Device>& devices) {
  return detail::parallel_apply_noted(replicas, inputs, devices, {});
}

}  // namespace dp::parallel
