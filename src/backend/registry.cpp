// The one place that knows which backends the program has: the CPU backend (in this library) and
// the backends that enlisted themselves when their library was linked or loaded (registry.h; the
// CUDA backend, dparallel::cuda). Each registers its kernels into the stubs of the kernel
// interfaces (kernel_stub.h) and its device runtime (dp/core/device_runtime.h), once, before the
// first kernel call or runtime lookup.
#include "backend/registry.h"
#include <array>
#include <atomic>
#include <mutex>
#include <vector>
#include "backend/kernel_stub.h"
#include "dp/config.h"  // DP_HAVE_CUDA: whether dparallel was built with the CUDA backend
#include "dp/core/device_registry.h"
#include "dp/core/device_runtime.h"
#include "dp/core/errors.h"

namespace dp::backend {

void register_cpu_kernels();  // src/backend/cpu/register.cpp

namespace {

// The enlisted backends. A function-local static: a backend library's registrar runs during static
// initialisation, in an order with this library's objects that nothing fixes.
struct Backends {
  std::mutex mu;
  std::array<RegisterBackendFn, kDeviceTypes> fns{};
  std::array<std::atomic<bool>, kDeviceTypes> enlisted{};
  bool registered = false;  // ensure_registered has run (under mu)
};

Backends& backends() {
  static Backends b;
  return b;
}

}  // namespace

// The stubs, enlisted while the program's static objects are constructed: function-local statics,
// since stubs live in several translation units whose order nothing fixes.
namespace {
struct StubList {
  std::mutex mu;
  std::vector<const KernelStubBase*> stubs;
};
StubList& stub_list() {
  static StubList* list = new StubList;  // never destroyed: stubs of other objects leave it at exit
  return *list;
}
}  // namespace

KernelStubBase::KernelStubBase(const char* name, const char* op, KernelCoverage coverage) : name_(name), op_(op), coverage_(coverage) {
  StubList& l = stub_list();
  std::lock_guard<std::mutex> lock(l.mu);
  l.stubs.push_back(this);
}

KernelStubBase::~KernelStubBase() {
  StubList& l = stub_list();
  std::lock_guard<std::mutex> lock(l.mu);
  std::erase(l.stubs, this);
}

std::vector<const KernelStubBase*> all_kernel_stubs() {
  StubList& l = stub_list();
  std::lock_guard<std::mutex> lock(l.mu);
  return l.stubs;
}

void enlist_backend(DeviceType type, RegisterBackendFn fn) {
  const auto t = static_cast<size_t>(type);
  DP_CHECK(type != DeviceType::CPU && t < kDeviceTypes && fn != nullptr, ValueError, "enlist_backend: not a backend that can be enlisted");
  Backends& b = backends();
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.enlisted[t].load()) return;  // the same library seen twice (static and shared copies)
  b.fns[t] = fn;
  b.enlisted[t].store(true, std::memory_order_release);
  if (b.registered) fn();  // loaded after the first kernel call (dlopen)
}

bool backend_enlisted(DeviceType type) {
  const auto t = static_cast<size_t>(type);
  return type == DeviceType::CPU || (t < kDeviceTypes && backends().enlisted[t].load(std::memory_order_acquire));
}

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    Backends& b = backends();
    std::lock_guard<std::mutex> lock(b.mu);
    register_cpu_kernels();
    for (RegisterBackendFn fn : b.fns)
      if (fn != nullptr) fn();
    b.registered = true;
  });
}

std::string no_kernel_message(const char* op, DeviceType type) {
  const char* name = type == DeviceType::CUDA ? "CUDA" : "CPU";
  const char* why = "";
  if (type == DeviceType::CUDA && !backend_enlisted(type))
#if DP_HAVE_CUDA
    why = " (dparallel::cuda, the CUDA library, is not linked)";
#else
    why = " (built without CUDA)";
#endif
  return detail::str("no ", name, " kernel for ", op, why);
}

void throw_no_kernel(const char* op, DeviceType type) { throw DeviceError(no_kernel_message(op, type)); }

}  // namespace dp::backend

namespace dp {

bool backend_linked(DeviceType type) { return backend::backend_enlisted(type); }

namespace detail {
void ensure_backends_registered() { backend::ensure_registered(); }
}  // namespace detail

}  // namespace dp
