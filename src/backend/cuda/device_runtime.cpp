// The CUDA backend's dp::DeviceRuntime (dp/core/device_runtime.h): what autograd, parallel_apply
// and the allocator lookup use without naming CUDA. Registered with the kernels
// (src/backend/cuda/register_kernels.cpp).
#include "dp/core/device_runtime.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"

namespace dp::backend::cuda {
namespace {

class CudaRuntime final : public DeviceRuntime {
 public:
  int device_count() const override { return detail::logical_device_count(); }
  int current_device() const override { return cuda::current_device(); }
  void set_device(int index) const override { cuda::set_device(index); }
  void restore_device(int index) const noexcept override {
    try {
      if (index >= 0) cuda::set_device(index);
    } catch (...) {  // a destructor's restore: an index that no longer exists is left as it is
    }
  }

  dp::Stream current_stream(int index) const override { return cuda::current_stream(index).generic(); }
  dp::Stream default_stream(int index) const override { return Stream::default_stream(index).generic(); }
  void set_current_stream(const dp::Stream& stream) const override { cuda::set_current_stream(Stream::from_generic(stream)); }
  void wait_stream(const dp::Stream& waiter, const dp::Stream& producer) const override {
    Event ready;
    ready.record(Stream::from_generic(producer));
    Stream::from_generic(waiter).wait(ready);
  }
  void record_stream(void* ptr, const dp::Stream& stream) const override {
    const Stream s = Stream::from_generic(stream);
    if (ptr == nullptr || caching_allocator(s.device()).block_size(ptr) == 0) return;  // not the caching allocator's
    cuda::record_stream(ptr, s);
  }

  Allocator& allocator(int index) const override { return device_allocator(index); }
  DeviceProperties properties(int index) const override {
    const DeviceInfo info = device_info(index);
    return DeviceProperties{info.total_memory, info.multi_processor_count};  // a virtual device reports its whole GPU
  }
};

}  // namespace

const DeviceRuntime& cuda_runtime() {
  static const CudaRuntime runtime;
  return runtime;
}

}  // namespace dp::backend::cuda
