#pragma once
// A kernel declared once, with one signature, and implemented by each backend (ATen's
// DispatchStub). A kernel has one name: the stub's, `dp::backend::<name>_kernel`, which each
// backend's implementation bears in its own namespace (`dp::backend::cpu::<name>_kernel`, the
// CUDA backend's `dp::backend::cuda::<name>_kernel`). The op calls the stub with a device type and never
// names a device; a device type with no implementation is an error that says so.
//
//   kernel interface (src/backend/<family>_kernels.h):
//       using CrossEntropyIndexForwardKernel = bool(const Tensor& out, ...);
//       DP_DECLARE_KERNEL(cross_entropy_index_forward_kernel, CrossEntropyIndexForwardKernel);
//   its .cpp:   DP_DEFINE_KERNEL(cross_entropy_index_forward_kernel, "cross_entropy", KernelCoverage::All);
//   the CPU backend (namespace dp::backend::cpu):
//       bool cross_entropy_index_forward_kernel(const Tensor& out, ...) { ... }
//       ... and in its register function: DP_REGISTER_KERNEL(CPU, cross_entropy_index_forward_kernel);
//   the op:     backend::cross_entropy_index_forward_kernel(x.device().type, out, ...);
//
// Every stub enlists itself when it is defined (all_kernel_stubs()), with the device types that
// must implement it (KernelCoverage), so one test checks every kernel of every backend.
//
// The backends register from functions that src/backend/registry.cpp calls once, before the first
// kernel runs: the CPU backend's by name, a backend library's (CUDA's) because its static registrar
// enlisted it when the library was linked or loaded (backend/registry.h).
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
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

// Which backends implement a kernel: both, or only one of them (a kernel the other backend does not
// have yet, or one that only a device backend needs, such as a copy between memories).
enum class KernelCoverage { All, CpuOnly, CudaOnly };

// What every stub knows independently of its signature: its name, the op its errors name, its
// coverage and which device types registered an implementation.
class KernelStubBase {
 public:
  KernelStubBase(const char* name, const char* op, KernelCoverage coverage);
  ~KernelStubBase();  // a stub of a test's own scope leaves the list again
  KernelStubBase(const KernelStubBase&) = delete;
  KernelStubBase& operator=(const KernelStubBase&) = delete;

  const char* name() const { return name_; }
  const char* op() const { return op_; }
  KernelCoverage coverage() const { return coverage_; }
  // Whether `type` has an implementation (registering the backends first).
  bool has(DeviceType type) const {
    ensure_registered();
    return registered_[static_cast<size_t>(type)];
  }

 protected:
  void mark(DeviceType type) { registered_[static_cast<size_t>(type)] = true; }

 private:
  const char* name_;
  const char* op_;
  KernelCoverage coverage_;
  std::array<bool, kDeviceTypes> registered_{};
};

// Every stub the program has now, in no particular order (each enlisted by its constructor).
std::vector<const KernelStubBase*> all_kernel_stubs();

template <typename Signature>
class KernelStub;

template <typename R, typename... Args>
class KernelStub<R(Args...)> : public KernelStubBase {
 public:
  using Signature = R(Args...);
  using Fn = R (*)(Args...);

  // name: the stub's identifier; op: the name errors give (the user-facing op, e.g. "cross_entropy").
  KernelStub(const char* name, const char* op, KernelCoverage coverage) : KernelStubBase(name, op, coverage) {}

  // Called by the backends' register functions only (under ensure_registered's once), through
  // DP_REGISTER_KERNEL.
  void set(DeviceType type, Fn fn) {
    fns_[static_cast<size_t>(type)] = fn;
    mark(type);
  }

  template <typename... A>
  R operator()(DeviceType type, A&&... args) const {
    ensure_registered();
    const Fn fn = fns_[static_cast<size_t>(type)];
    if (fn == nullptr) throw_no_kernel(op(), type);
    return fn(std::forward<A>(args)...);
  }

 private:
  std::array<Fn, kDeviceTypes> fns_{};
};

}  // namespace dp::backend

#define DP_DECLARE_KERNEL(name, signature) extern ::dp::backend::KernelStub<signature> name
// coverage: KernelCoverage::All, ::CpuOnly or ::CudaOnly (checked for every stub by a test).
#define DP_DEFINE_KERNEL(name, op, coverage) \
  decltype(name) name { #name, op, ::dp::backend::coverage }
// In a backend's register function, inside the backend's namespace (dp::backend::cpu, dp::cuda):
// the stub `name` gets this backend's function of the same name, whose type must be the stub's
// signature exactly (no overload, no conversion).
#define DP_REGISTER_KERNEL(device, name)                                                                                                       \
  do {                                                                                                                                         \
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(name)>, typename std::remove_cvref_t<decltype(::dp::backend::name)>::Signature>, \
                  #name ": the implementation's type is not the stub's signature");                                                            \
    ::dp::backend::name.set(::dp::DeviceType::device, &name);                                                                                  \
  } while (false)
