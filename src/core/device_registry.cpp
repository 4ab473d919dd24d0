#include "dp/core/device_registry.h"
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include "dp/config.h"  // DP_HAVE_CUDA: whether dparallel was built with the CUDA backend
#include "dp/core/device_runtime.h"
#include "dp/core/errors.h"

namespace dp {
namespace {

constexpr int kMaxCpuDevices = 4096;
constexpr int kMaxAcceleratorDevices = 64;

int default_cpu_count() {
  if (const char* env = std::getenv("DP_CPU_DEVICES")) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= kMaxCpuDevices) return static_cast<int>(n);
    throw ValueError(detail::str("DP_CPU_DEVICES must be an integer in [1, ", kMaxCpuDevices, "], got '", env, "'"));
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

struct Registry {
  std::mutex mu;
  std::atomic<int> cpu_count{-1};
  std::atomic<bool> workers_started{false};
  std::array<std::atomic<Worker*>, kMaxCpuDevices> cpu_workers{};
  std::array<std::atomic<Worker*>, kMaxAcceleratorDevices> accelerator_workers{};
  // Workers are owned here and joined at exit; queue draining makes shutdown clean.
  std::vector<std::unique_ptr<Worker>> owned;
  ~Registry() {
    // Join every thread before freeing any Worker: a task on one worker may still be notifying
    // another (the engine wakes a waiting worker when a graph task finishes).
    for (auto& w : owned) w->shutdown();
    for (auto& w : owned) w.reset();
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

// A GPU's worker: the thread that runs the backward of nodes on that GPU (as PyTorch's engine has
// one thread per device) and DataParallel's replica on it. Its first task makes the GPU its
// current device, so the kernels it launches go to that GPU's current stream.
Worker* accelerator_worker(Registry& r, Device d) {
  check_device(d);  // "cuda:i does not exist" without the CUDA backend or that GPU
  DP_CHECK(d.index < kMaxAcceleratorDevices, DeviceError, "no worker for ", d.str(), ": at most ", kMaxAcceleratorDevices,
           " CUDA devices are supported");
  if (Worker* w = r.accelerator_workers[d.index].load(std::memory_order_acquire)) return w;
  std::lock_guard<std::mutex> lock(r.mu);
  if (Worker* w = r.accelerator_workers[d.index].load()) return w;
  r.owned.push_back(std::make_unique<Worker>(d));
  Worker* w = r.owned.back().get();
  w->post([d] { device_runtime(d.type)->set_device(d.index); });  // check_device found the runtime
  r.accelerator_workers[d.index].store(w, std::memory_order_release);
  r.workers_started.store(true);
  return w;
}

}  // namespace

int cpu_device_count() {
  Registry& r = registry();
  int n = r.cpu_count.load(std::memory_order_acquire);
  if (n >= 0) return n;
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.cpu_count.load() < 0) r.cpu_count.store(default_cpu_count());
  return r.cpu_count.load();
}

void set_cpu_device_count(int n) {
  Registry& r = registry();
  DP_CHECK(n >= 1 && n <= kMaxCpuDevices, ValueError, "set_cpu_device_count: expected 1 to ", kMaxCpuDevices, " devices, got ", n);
  std::lock_guard<std::mutex> lock(r.mu);
  int current = r.cpu_count.load();
  // Growing is always safe; shrinking below a started worker would strand its tensors.
  if (r.workers_started.load() && current >= 0 && n < current) {
    for (int i = n; i < current; ++i)
      DP_CHECK(r.cpu_workers[i].load() == nullptr, DeviceError, "set_cpu_device_count(", n, "): cpu:", i,
               " is already in use; the CPU device count can only grow after devices were used");
  }
  r.cpu_count.store(n);
}

int cuda_device_count() {
  const DeviceRuntime* rt = device_runtime(DeviceType::CUDA);
  return rt != nullptr ? rt->device_count() : 0;  // 0 without the CUDA backend, a driver or a GPU
}

int device_count(DeviceType type) { return type == DeviceType::CPU ? cpu_device_count() : cuda_device_count(); }

std::vector<Device> devices(DeviceType type) {
  std::vector<Device> out;
  int n = device_count(type);
  for (int i = 0; i < n; ++i) out.emplace_back(type, i);
  return out;
}

void check_device(Device d) {
  if (d.is_cpu()) {
    if (d.index < 0) return;
    int n = cpu_device_count();
    DP_CHECK(d.index < n, DeviceError, d.str(), " does not exist: there are ", n, " CPU devices (cpu:0 … cpu:", n - 1,
             "; set DP_CPU_DEVICES or call dp::set_cpu_device_count for more)");
    return;
  }
  int n = cuda_device_count();
  DP_CHECK(
      d.index >= 0 && d.index < n, DeviceError, d.str(), " does not exist: ",
      n == 0 ? detail::str("no CUDA devices are available (", detail::no_cuda_devices_reason(), ")") : detail::str("there are ", n, " CUDA devices"));
}

namespace detail {

std::string no_cuda_devices_reason() {
#if DP_HAVE_CUDA
  if (!backend_linked(DeviceType::CUDA))
    return "this program does not link dparallel's CUDA library, dparallel::cuda (libdparallel_cuda): link it as well to use GPUs";
  return "no GPU is visible";
#else
  return "dparallel was built without the CUDA backend";
#endif
}

}  // namespace detail

Worker* worker_for(Device d) {
  if (d.is_cpu() && d.index < 0) return nullptr;
  Registry& r = registry();
  if (!d.is_cpu()) return accelerator_worker(r, d);
  // The index is checked against the array before it is used (a Device can hold up to 32767).
  if (d.index < kMaxCpuDevices) {
    if (Worker* w = r.cpu_workers[d.index].load(std::memory_order_acquire)) return w;
  }
  check_device(d);
  std::lock_guard<std::mutex> lock(r.mu);
  if (Worker* w = r.cpu_workers[d.index].load()) return w;
  // Checked again under the lock: set_cpu_device_count may have shrunk the count meanwhile.
  const int n = r.cpu_count.load();
  DP_CHECK(d.index < n, DeviceError, d.str(), " does not exist: there are ", n, " CPU devices (cpu:0 … cpu:", n - 1,
           "; set DP_CPU_DEVICES or call dp::set_cpu_device_count for more)");
  r.owned.push_back(std::make_unique<Worker>(d));
  Worker* w = r.owned.back().get();
  r.cpu_workers[d.index].store(w, std::memory_order_release);
  r.workers_started.store(true);
  return w;
}

}  // namespace dp

namespace dp::cuda {

int device_count() { return cuda_device_count(); }
bool is_available() { return cuda_device_count() > 0; }

}  // namespace dp::cuda
