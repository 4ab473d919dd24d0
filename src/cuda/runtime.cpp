// CUDA runtime basics (dp/cuda/cuda.h): devices, streams, events, the checked-call error.
#include <cuda_runtime_api.h>
#include <vector>
#include "dp/core/errors.h"
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"

namespace dp::cuda {

namespace detail {
void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // a non-sticky error must not show up again in the next check
  std::string msg = dp::detail::str("CUDA error: ", call, " failed with ", cudaGetErrorName(err), " (", static_cast<int>(err),
                                    "): ", cudaGetErrorString(err), " at ", file, ":", line);
  if (err == cudaErrorMemoryAllocation) throw OutOfMemory(msg);
  throw DeviceError(msg);
}
}  // namespace detail

int device_count() {
  static const int count = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;  // no driver, no device, stub library, …: no CUDA devices
    }
    return n < 0 ? 0 : n;
  }();
  return count;
}

bool is_available() { return device_count() > 0; }

namespace {
void check_index(int device, const char* what) {
  const int n = device_count();
  DP_CHECK(n > 0, DeviceError, what, ": no CUDA devices are available");
  DP_CHECK(device >= 0 && device < n, DeviceError, what, ": cuda:", device, " does not exist: there are ", n, " CUDA devices");
}
int resolve(int device) { return device < 0 ? current_device() : device; }
}  // namespace

int current_device() {
  DP_CHECK(is_available(), DeviceError, "current_device: no CUDA devices are available");
  int d = 0;
  DP_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  check_index(device, "set_device");
  DP_CUDA_CHECK(cudaSetDevice(device));
}

void synchronize(int device) {
  DeviceGuard guard(resolve(device));
  DP_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceGuard::DeviceGuard(int device) : previous_(current_device()) {
  if (device != previous_) set_device(device);
}
DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

// ---- streams ----

Stream::Stream() : device_(is_available() ? current_device() : -1), handle_(nullptr) {}

Stream Stream::default_stream(int device) {
  check_index(device, "Stream::default_stream");
  return Stream(device, nullptr, nullptr);
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

bool Stream::query() const {
  const cudaError_t err = cudaStreamQuery(handle_);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  detail::throw_cuda_error(err, "cudaStreamQuery(stream)", __FILE__, __LINE__);
}

void Stream::synchronize() const { DP_CUDA_CHECK(cudaStreamSynchronize(handle_)); }

void Stream::wait(const Event& event) const {
  if (!event.recorded()) return;  // nothing to wait for, as PyTorch
  DeviceGuard guard(device_);
  DP_CUDA_CHECK(cudaStreamWaitEvent(handle_, event.handle(), 0));
}

namespace {
// The calling thread's current stream per device (index = device); missing = default stream.
thread_local std::vector<Stream> tls_current;
}  // namespace

Stream current_stream(int device) {
  device = resolve(device);
  check_index(device, "current_stream");
  if (device < static_cast<int>(tls_current.size()) && tls_current[device].device() == device) return tls_current[device];
  return Stream::default_stream(device);
}

void set_current_stream(const Stream& stream) {
  check_index(stream.device(), "set_current_stream");
  if (static_cast<int>(tls_current.size()) <= stream.device()) {
    tls_current.resize(device_count(), Stream::default_stream(stream.device()));
    // Entries for other devices hold a stream of the wrong device and read as "default".
  }
  tls_current[stream.device()] = stream;
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()), previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}
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
