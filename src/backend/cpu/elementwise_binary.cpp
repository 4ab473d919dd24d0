// The CPU kernels of the binary element-wise ops (the kernel interface: backend/elementwise_kernels.h;
// the ops: src/ops/elementwise_binary.cpp, elementwise_inplace.cpp): the shared templates of
// backend/elementwise_impl.h on the CPU launcher, registered as they are.
#include "backend/elementwise_kernels.h"
#include "backend/elementwise_impl.h"
#include "backend/cpu/elementwise_loops.h"
#include "dp/core/errors.h"

namespace dp::kernels {

// CpuLaunch's refusal of a device operand (backend/cpu/elementwise_loops.h).
void throw_cuda_operand_on_cpu(const Tensor& out, const Tensor& in) {
  throw DeviceError(::dp::detail::str("expected all tensors to be on the same device, but found at least two devices, ", out.device().str(), " and ",
                                      in.device().str(), "!"));
}

}  // namespace dp::kernels

namespace dp::backend {

void register_cpu_elementwise_binary_kernels() {
  using kernels::CpuLaunch;
  namespace impl = kernels::impl;
  add_stub.set(DeviceType::CPU, &impl::add_kernel<CpuLaunch>);
  add_scalar_stub.set(DeviceType::CPU, &impl::add_scalar_kernel<CpuLaunch>);
  rsub_scalar_stub.set(DeviceType::CPU, &impl::rsub_scalar_kernel<CpuLaunch>);
  mul_stub.set(DeviceType::CPU, &impl::mul_kernel<CpuLaunch>);
  mul_scalar_stub.set(DeviceType::CPU, &impl::mul_scalar_kernel<CpuLaunch>);
  div_stub.set(DeviceType::CPU, &impl::div_kernel<CpuLaunch>);
  div_scalar_stub.set(DeviceType::CPU, &impl::div_scalar_kernel<CpuLaunch>);
  rdiv_scalar_stub.set(DeviceType::CPU, &impl::rdiv_scalar_kernel<CpuLaunch>);
  pow_stub.set(DeviceType::CPU, &impl::pow_kernel<CpuLaunch>);
  pow_scalar_stub.set(DeviceType::CPU, &impl::pow_scalar_kernel<CpuLaunch>);
  rpow_scalar_stub.set(DeviceType::CPU, &impl::rpow_scalar_kernel<CpuLaunch>);
  maximum_stub.set(DeviceType::CPU, &impl::maximum_kernel<CpuLaunch>);
  minimum_stub.set(DeviceType::CPU, &impl::minimum_kernel<CpuLaunch>);
  extremum_weight_stub.set(DeviceType::CPU, &impl::extremum_weight_kernel<CpuLaunch>);
  lerp_stub.set(DeviceType::CPU, &impl::lerp_kernel<CpuLaunch>);
  where_stub.set(DeviceType::CPU, &impl::where_kernel<CpuLaunch>);
  where_scalar_stub.set(DeviceType::CPU, &impl::where_scalar_kernel<CpuLaunch>);
  addcmul_stub.set(DeviceType::CPU, &impl::addcmul_kernel<CpuLaunch>);
  addcdiv_stub.set(DeviceType::CPU, &impl::addcdiv_kernel<CpuLaunch>);
}

}  // namespace dp::backend
