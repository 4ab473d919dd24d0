// The CPU kernels of the binary element-wise ops (the kernel interface: backend/elementwise_kernels.h;
// the ops: src/ops/elementwise_binary.cpp, elementwise_inplace.cpp): the shared templates of
// backend/elementwise_impl.h on the CPU launcher, registered as they are.
#include "backend/elementwise_kernels.h"
#include "backend/elementwise_impl.h"
#include "backend/cpu/elementwise_loops.h"
#include "dp/core/errors.h"

namespace dp::backend::cpu {

// CpuLaunch's refusal of a device operand (backend/cpu/elementwise_loops.h).
void throw_cuda_operand_on_cpu(const Tensor& out, const Tensor& in) {
  throw DeviceError(::dp::detail::str("expected all tensors to be on the same device, but found at least two devices, ", out.device().str(), " and ",
                                      in.device().str(), "!"));
}

}  // namespace dp::backend::cpu

namespace dp::backend::cpu {

// The CPU kernels: the shared templates instantiated on the CPU launcher, each under its stub's
// name and bound with its stub's signature.
BinaryScalarKernel& add_kernel = impl::add_kernel<CpuLaunch>;
AddScalarKernel& add_scalar_kernel = impl::add_scalar_kernel<CpuLaunch>;
TensorScalarKernel& rsub_scalar_kernel = impl::rsub_scalar_kernel<CpuLaunch>;
BinaryKernel& mul_kernel = impl::mul_kernel<CpuLaunch>;
TensorScalarKernel& mul_scalar_kernel = impl::mul_scalar_kernel<CpuLaunch>;
BinaryKernel& div_kernel = impl::div_kernel<CpuLaunch>;
TensorScalarKernel& div_scalar_kernel = impl::div_scalar_kernel<CpuLaunch>;
ScalarTensorKernel& rdiv_scalar_kernel = impl::rdiv_scalar_kernel<CpuLaunch>;
BinaryKernel& pow_kernel = impl::pow_kernel<CpuLaunch>;
TensorScalarKernel& pow_scalar_kernel = impl::pow_scalar_kernel<CpuLaunch>;
ScalarTensorKernel& rpow_scalar_kernel = impl::rpow_scalar_kernel<CpuLaunch>;
BinaryKernel& maximum_kernel = impl::maximum_kernel<CpuLaunch>;
BinaryKernel& minimum_kernel = impl::minimum_kernel<CpuLaunch>;
ExtremumWeightKernel& extremum_weight_kernel = impl::extremum_weight_kernel<CpuLaunch>;
BinaryScalarKernel& lerp_kernel = impl::lerp_kernel<CpuLaunch>;
WhereKernel& where_kernel = impl::where_kernel<CpuLaunch>;
BinaryScalarKernel& where_scalar_kernel = impl::where_scalar_kernel<CpuLaunch>;
PointwiseKernel& addcmul_kernel = impl::addcmul_kernel<CpuLaunch>;
PointwiseKernel& addcdiv_kernel = impl::addcdiv_kernel<CpuLaunch>;

void register_elementwise_binary_kernels() {
  DP_REGISTER_KERNEL(CPU, add_kernel);
  DP_REGISTER_KERNEL(CPU, add_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, rsub_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, mul_kernel);
  DP_REGISTER_KERNEL(CPU, mul_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, div_kernel);
  DP_REGISTER_KERNEL(CPU, div_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, rdiv_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, pow_kernel);
  DP_REGISTER_KERNEL(CPU, pow_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, rpow_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, maximum_kernel);
  DP_REGISTER_KERNEL(CPU, minimum_kernel);
  DP_REGISTER_KERNEL(CPU, extremum_weight_kernel);
  DP_REGISTER_KERNEL(CPU, lerp_kernel);
  DP_REGISTER_KERNEL(CPU, where_kernel);
  DP_REGISTER_KERNEL(CPU, where_scalar_kernel);
  DP_REGISTER_KERNEL(CPU, addcmul_kernel);
  DP_REGISTER_KERNEL(CPU, addcdiv_kernel);
}

}  // namespace dp::backend::cpu
