// The one place that knows which backends this build has: each registers its kernels into the
// stubs of the kernel interfaces (kernel_stub.h) and its device runtime (dp/core/device_runtime.h),
// once, before the first kernel call or runtime lookup.
#include <mutex>
#include "backend/kernel_stub.h"
#include "dp/core/device_runtime.h"
#include "dp/core/errors.h"

namespace dp::backend {

void register_cpu_kernels();  // src/backend/cpu/register.cpp
#if DP_HAVE_CUDA
void register_cuda_kernels();  // src/backend/cuda/register_kernels.cpp
#endif

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_kernels();
#if DP_HAVE_CUDA
    register_cuda_kernels();
#endif
  });
}

std::string no_kernel_message(const char* op, DeviceType type) {
  const char* name = type == DeviceType::CUDA ? "CUDA" : "CPU";
#if DP_HAVE_CUDA
  const bool built = true;
#else
  const bool built = type != DeviceType::CUDA;
#endif
  return detail::str("no ", name, " kernel for ", op, built ? "" : " (built without CUDA)");
}

void throw_no_kernel(const char* op, DeviceType type) { throw DeviceError(no_kernel_message(op, type)); }

}  // namespace dp::backend

namespace dp::detail {
void ensure_backends_registered() { backend::ensure_registered(); }
}  // namespace dp::detail
