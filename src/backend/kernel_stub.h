#pragma once
// A kernel declared once, with one signature, and implemented by each backend (ATen's
// DispatchStub). The op never names a device; a device type with no implementation is an error
// that says so.
//
//   kernel interface (src/backend/<family>_kernels.h):
//       using CrossEntropyIndexForward = bool(const Tensor& out, ...);
//       DP_DECLARE_KERNEL(cross_entropy_index_forward, CrossEntropyIndexForward);
//   its .cpp:                 DP_DEFINE_KERNEL(cross_entropy_index_forward, "cross_entropy");
//   a backend's register_*_kernels():
//       cross_entropy_index_forward.set(DeviceType::CPU, &cross_entropy_index_forward_cpu);
//   the op:                   cross_entropy_index_forward(x.device().type, out, ...);
//
// The backends register from functions that src/backend/registry.cpp calls once, before the first
// kernel runs: the CPU backend's by name, a backend library's (CUDA's) because its static registrar
// enlisted it when the library was linked or loaded (backend/registry.h).
#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include "dp/core/device.h"

namespace dp::backend {

inline constexpr size_t kDeviceTypes = static_cast<size_t>(DeviceType::CUDA) + 1;

// Registers every backend's kernels, once; thread-safe, and cheap after the first call.
void ensure_registered();
// "no CUDA kernel for cross_entropy", plus " (built without CUDA)" in such a build, or
// " (dparallel::cuda, the CUDA library, is not linked)" in a program without it.
std::string no_kernel_message(const char* op, DeviceType type);
// DeviceError with no_kernel_message.
[[noreturn]] void throw_no_kernel(const char* op, DeviceType type);

template <typename Signature>
class KernelStub;

template <typename R, typename... Args>
class KernelStub<R(Args...)> {
 public:
  using Fn = R (*)(Args...);

  // op: the name errors give (the user-facing op, e.g. "cross_entropy").
  explicit constexpr KernelStub(const char* op) : op_(op) {}
  KernelStub(const KernelStub&) = delete;
  KernelStub& operator=(const KernelStub&) = delete;

  // Called by the backends' register functions only (under ensure_registered's once).
  void set(DeviceType type, Fn fn) { fns_[static_cast<size_t>(type)] = fn; }

  bool has(DeviceType type) const {
    ensure_registered();
    return fns_[static_cast<size_t>(type)] != nullptr;
  }

  template <typename... A>
  R operator()(DeviceType type, A&&... args) const {
    ensure_registered();
    const Fn fn = fns_[static_cast<size_t>(type)];
    if (fn == nullptr) throw_no_kernel(op_, type);
    return fn(std::forward<A>(args)...);
  }

 private:
  const char* op_;
  std::array<Fn, kDeviceTypes> fns_{};
};

}  // namespace dp::backend

#define DP_DECLARE_KERNEL(name, signature) extern ::dp::backend::KernelStub<signature> name
#define DP_DEFINE_KERNEL(name, op) \
  decltype(name) name { op }
