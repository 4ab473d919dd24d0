// The CPU kernels of the unary element-wise ops, clamp, the activations' backward, comparisons and
// logical_not (the kernel interface: backend/elementwise_kernels.h; the ops:
// src/ops/elementwise_unary.cpp, activation.cpp, elementwise_compare.cpp): the shared templates of
// backend/elementwise_impl.h on the CPU launcher, registered as they are.
#include "backend/elementwise_kernels.h"
#include "backend/elementwise_impl.h"
#include "backend/cpu/elementwise_loops.h"

namespace dp::backend {

void register_cpu_elementwise_unary_kernels() {
  using kernels::CpuLaunch;
  namespace impl = kernels::impl;
  unary_stub.set(DeviceType::CPU, &impl::unary_kernel<CpuLaunch>);
  clamp_stub.set(DeviceType::CPU, &impl::clamp_kernel<CpuLaunch>);
  clamp_mask_stub.set(DeviceType::CPU, &impl::clamp_mask_kernel<CpuLaunch>);
  activation_backward_stub.set(DeviceType::CPU, &impl::activation_backward_kernel<CpuLaunch>);
  compare_stub.set(DeviceType::CPU, &impl::compare_kernel<CpuLaunch>);
  compare_scalar_stub.set(DeviceType::CPU, &impl::compare_scalar_kernel<CpuLaunch>);
  logical_not_stub.set(DeviceType::CPU, &impl::logical_not_kernel<CpuLaunch>);
}

}  // namespace dp::backend
