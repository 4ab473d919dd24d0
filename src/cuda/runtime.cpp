// CUDA runtime basics (dp/cuda/cuda.h): devices, streams, events, the checked-call error.
#include <cuda_runtime_api.h>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <vector>
#include "dp/core/errors.h"
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#include "cuda/device_map.h"

namespace dp::cuda {

using detail::DeviceMap;
using detail::kMaxLogicalDevices;
using detail::make_device_map;

namespace detail {
void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // a non-sticky error must not show up again in the next check
  std::string msg = dp::detail::str("CUDA error: ", call, " failed with ", cudaGetErrorName(err), " (", static_cast<int>(err),
                                    "): ", cudaGetErrorString(err), " at ", file, ":", line);
  if (err == cudaErrorMemoryAllocation) throw OutOfMemory(msg);
  throw DeviceError(msg);
}
}  // namespace detail

namespace {

// The logical device map, read once. A malformed DP_CUDA_VIRTUAL_DEVICES throws from here (and
// again from every later call: the static stays uninitialised).
const DeviceMap& device_map() {
  static const DeviceMap map = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;  // no driver, no device, stub library, …: no CUDA devices
    }
    return make_device_map(std::getenv("DP_CUDA_VIRTUAL_DEVICES"), n < 0 ? 0 : n);
  }();
  return map;
}

// The calling thread's current logical device as last set through set_device (-1: never). The
// runtime's current device is physical and cannot tell logical devices on one GPU apart.
thread_local int tls_device = -1;

void check_index(int device, const char* what) {
  const int n = detail::logical_device_count();
  DP_CHECK(n > 0, DeviceError, what, ": no CUDA devices are available");
  DP_CHECK(device >= 0 && device < n, DeviceError, what, ": cuda:", device, " does not exist: there are ", n, " CUDA devices");
}
int resolve(int device) { return device < 0 ? current_device() : device; }

// Makes logical `device` current without checks or exceptions (for destructors).
void restore_device(int device) noexcept {
  const DeviceMap& m = device_map();
  if (device < 0 || device >= m.count()) return;
  int now = -1;
  const int want = m.physical[static_cast<size_t>(device)];
  if (cudaGetDevice(&now) != cudaSuccess || now != want) (void)cudaSetDevice(want);
  tls_device = device;
}

}  // namespace

namespace detail {
int logical_device_count() { return device_map().count(); }
}  // namespace detail

int physical_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n < 0 ? 0 : n;
  }();
  return count;
}

bool virtual_devices_enabled() { return device_map().is_virtual; }

int physical_device(int device) {
  check_index(device, "physical_device");
  return device_map().physical[static_cast<size_t>(device)];
}

int current_device() {
  DP_CHECK(detail::logical_device_count() > 0, DeviceError, "current_device: no CUDA devices are available");
  int d = 0;
  DP_CUDA_CHECK(cudaGetDevice(&d));
  const DeviceMap& m = device_map();
  if (tls_device >= 0 && tls_device < m.count() && m.physical[static_cast<size_t>(tls_device)] == d) return tls_device;
  // Never set here, or changed behind our back with cudaSetDevice: the first logical device on
  // that GPU (logical == physical without virtual devices).
  const int logical = m.first_logical(d);
  return logical >= 0 ? logical : 0;
}

void set_device(int device) {
  check_index(device, "set_device");
  DP_CUDA_CHECK(cudaSetDevice(device_map().physical[static_cast<size_t>(device)]));
  tls_device = device;
}

void synchronize(int device) {
  DeviceGuard guard(resolve(device));
  DP_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceGuard::DeviceGuard(int device) : previous_(current_device()) {
  if (device != previous_) set_device(device);
}
DeviceGuard::~DeviceGuard() { restore_device(previous_); }

bool enable_peer_access(int device, int peer) {
  const int a = physical_device(device);
  const int b = physical_device(peer);
  if (a == b) return true;
  // State per physical pair: 0 unknown, 1 enabled, 2 not possible. Racing first calls both try;
  // the loser sees "already enabled", which counts as success.
  static std::atomic<uint8_t> state[kMaxLogicalDevices][kMaxLogicalDevices] = {};
  if (a >= kMaxLogicalDevices || b >= kMaxLogicalDevices) return false;
  std::atomic<uint8_t>& s = state[a][b];
  const uint8_t known = s.load(std::memory_order_acquire);
  if (known != 0) return known == 1;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess) {
    (void)cudaGetLastError();
    can = 0;
  }
  bool ok = false;
  if (can) {
    DeviceGuard guard(device);
    const cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
    ok = err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled;
    if (err != cudaSuccess) (void)cudaGetLastError();
  }
  s.store(ok ? 1 : 2, std::memory_order_release);
  return ok;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  DP_CUDA_CHECK(cudaGetDeviceProperties(&p, physical_device(device)));
  DeviceInfo info;
  info.name = p.name;
  info.total_memory = static_cast<int64_t>(p.totalGlobalMem);
  info.multi_processor_count = p.multiProcessorCount;
  info.major = p.major;
  info.minor = p.minor;
  return info;
}

// ---- streams ----

namespace {

// With virtual devices: each logical device's default stream, created on first use and shared by
// every thread (as the legacy default stream is). Never destroyed: work may be queued at exit.
Stream virtual_default_stream(int device) {
  struct Table {
    std::once_flag once[kMaxLogicalDevices];
    std::optional<Stream> stream[kMaxLogicalDevices];
  };
  static auto* table = new Table();
  const size_t i = static_cast<size_t>(device);
  std::call_once(table->once[i], [&] { table->stream[i] = Stream::create(device); });
  return *table->stream[i];
}

}  // namespace

Stream::Stream() : device_(-1), handle_(nullptr) {
  if (detail::logical_device_count() > 0) *this = default_stream(current_device());
}

Stream Stream::default_stream(int device) {
  check_index(device, "Stream::default_stream");
  if (device_map().is_virtual) return virtual_default_stream(device);
  return Stream(device, nullptr, nullptr);
}

bool Stream::is_default() const {
  if (handle_ == nullptr) return true;
  return device_ >= 0 && device_map().is_virtual && device_ < detail::logical_device_count() && handle_ == virtual_default_stream(device_).handle_;
}

Stream Stream::create(int device, int priority) {
  check_index(device, "Stream::create");
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  DP_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  // The deleter may run at exit after the runtime is torn down: its error is ignored.
  std::shared_ptr<CUstream_st> owner(s, [](CUstream_st* p) { (void)cudaStreamDestroy(p); });
  return Stream(device, s, std::move(owner));
}

dp::Stream Stream::generic() const { return dp::Stream(Device::cuda(device_), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle_)), owner_); }

Stream Stream::from_generic(const dp::Stream& stream) {
  DP_CHECK(stream.device().is_cuda(), DeviceError, "cuda::Stream: ", stream.device().str(), "'s stream is not a CUDA stream");
  return Stream(stream.device().index, reinterpret_cast<CUstream_st*>(static_cast<uintptr_t>(stream.id())),
                std::static_pointer_cast<CUstream_st>(stream.owner()));
}

bool Stream::query() const {
  // The legacy default stream (null handle) means the current GPU's: make this stream's device
  // current, or another device's default stream would be queried.
  std::optional<DeviceGuard> guard;
  if (handle_ == nullptr && device_ >= 0) guard.emplace(device_);
  const cudaError_t err = cudaStreamQuery(handle_);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  detail::throw_cuda_error(err, "cudaStreamQuery(stream)", __FILE__, __LINE__);
}

void Stream::synchronize() const {
  if (handle_ == nullptr && device_ >= 0) {
    // The legacy default stream means the current GPU's: make this stream's device current.
    DeviceGuard guard(device_);
    DP_CUDA_CHECK(cudaStreamSynchronize(handle_));
    return;
  }
  DP_CUDA_CHECK(cudaStreamSynchronize(handle_));
}

void Stream::wait(const Event& event) const {
  if (!event.recorded()) return;  // nothing to wait for, as PyTorch
  DeviceGuard guard(device_);
  DP_CUDA_CHECK(cudaStreamWaitEvent(handle_, event.handle(), 0));
}

namespace {
// The calling thread's current stream per device (index = device); empty = the default stream.
thread_local std::vector<std::optional<Stream>> tls_current;
}  // namespace

Stream current_stream(int device) {
  device = resolve(device);
  check_index(device, "current_stream");
  if (device < static_cast<int>(tls_current.size()) && tls_current[static_cast<size_t>(device)]) return *tls_current[static_cast<size_t>(device)];
  return Stream::default_stream(device);
}

void set_current_stream(const Stream& stream) {
  check_index(stream.device(), "set_current_stream");
  if (static_cast<int>(tls_current.size()) <= stream.device()) tls_current.resize(static_cast<size_t>(detail::logical_device_count()));
  tls_current[static_cast<size_t>(stream.device())] = stream;
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()), previous_(current_stream(stream.device())) { set_current_stream(stream); }
StreamGuard::~StreamGuard() { set_current_stream(previous_); }

// ---- events ----

Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}
Event::Event(Event&& other) noexcept : timing_(other.timing_), device_(other.device_), event_(other.event_) { other.event_ = nullptr; }
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) (void)cudaEventDestroy(event_);
    timing_ = other.timing_;
    device_ = other.device_;
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  DP_CHECK(event_ == nullptr || device_ == stream.device(), DeviceError, "Event::record: the event was created on cuda:", device_,
           " and cannot be recorded on a stream of cuda:", stream.device());
  DeviceGuard guard(stream.device());
  if (event_ == nullptr) {
    cudaEvent_t e = nullptr;
    DP_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    event_ = e;
    device_ = stream.device();
  }
  DP_CUDA_CHECK(cudaEventRecord(event_, stream.handle()));
}

bool Event::query() const {
  if (event_ == nullptr) return true;
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  detail::throw_cuda_error(err, "cudaEventQuery(event)", __FILE__, __LINE__);
}

void Event::synchronize() const {
  if (event_) DP_CUDA_CHECK(cudaEventSynchronize(event_));
}

float Event::elapsed_ms(const Event& end) const {
  DP_CHECK(timing_ && end.timing_, ValueError, "Event::elapsed_ms: both events must be created with enable_timing = true");
  DP_CHECK(event_ && end.event_, ValueError, "Event::elapsed_ms: both events must be recorded first");
  float ms = 0;
  DP_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace dp::cuda
