// Kernels of the CPU backend that still live in src/core/kernels (moving into this folder family by
// family), registered into the kernel interfaces' stubs.
#include "backend/random_kernels.h"
#include "core/kernels/norm_kernels.h"

namespace dp::backend {

void register_cpu_core_kernels() {
  dropout_forward.set(DeviceType::CPU, &kernels::dropout_forward_kernel);
  dropout_apply.set(DeviceType::CPU, &kernels::dropout_apply_kernel);
}

}  // namespace dp::backend
