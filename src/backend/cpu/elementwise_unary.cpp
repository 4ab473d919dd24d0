// The CPU kernels of the unary element-wise ops, clamp, the activations' backward, comparisons and
// logical_not (the kernel interface: backend/elementwise_kernels.h; the ops:
// src/ops/elementwise_unary.cpp, activation.cpp, elementwise_compare.cpp): the shared templates of
// backend/elementwise_impl.h on the CPU launcher, registered as they are.
#include "backend/elementwise_kernels.h"
#include "backend/elementwise_impl.h"
#include "backend/cpu/elementwise_loops.h"

namespace dp::backend::cpu {

// The CPU kernels: the shared templates instantiated on the CPU launcher, each under its stub's
// name and bound with its stub's signature.
UnaryKernel& unary_kernel = impl::unary_kernel<CpuLaunch>;
ClampKernel& clamp_kernel = impl::clamp_kernel<CpuLaunch>;
ClampKernel& clamp_mask_kernel = impl::clamp_mask_kernel<CpuLaunch>;
ActivationBackwardKernel& activation_backward_kernel = impl::activation_backward_kernel<CpuLaunch>;
CompareKernel& compare_kernel = impl::compare_kernel<CpuLaunch>;
CompareScalarKernel& compare_scalar_kernel = impl::compare_scalar_kernel<CpuLaunch>;
LogicalNotKernel& logical_not_kernel = impl::logical_not_kernel<CpuLaunch>;

void register_elementwise_unary_kernels() {
  DP_REGISTER_KERNEL(CPU, unary_kernel);
  DP_REGISTER_KERNEL(CPU, clamp_kernel);
  DP_REGISTER_KERNEL(CPU, clamp_mask_kernel);
  DP_REGISTER_KERNEL(CPU, activation_backward_kernel);
  DP_REGISTER_KERNEL(CPU, compare_kernel);
  DP_REGISTER_KERNEL(CPU, compare_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, logical_not_kernel);
}

}  // namespace dp::backend::cpu
