// The CUDA backend's element-wise kernels, copies and fills, registered into the stubs of
// backend/elementwise_kernels.h and backend/copy_kernels.h (called from register_cuda_kernels()).
#include "backend/copy_kernels.h"
#include "backend/elementwise_kernels.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/transfer.h"

namespace dp::backend {
namespace {

// A copy with a CUDA operand: on one device the CUDA copy kernel, else a transfer (host <-> device,
// or between devices), which does not wait where it need not.
void copy_cuda(const Tensor& dst, const Tensor& src) {
  if (dst.device() == src.device())
    cuda::copy_kernel(dst, src);
  else
    cuda::copy_across(dst, src, false);
}

}  // namespace

void register_cuda_elementwise_kernels() {
  add_stub.set(DeviceType::CUDA, &cuda::add_kernel);
  add_scalar_stub.set(DeviceType::CUDA, &cuda::add_scalar_kernel);
  rsub_scalar_stub.set(DeviceType::CUDA, &cuda::rsub_scalar_kernel);
  mul_stub.set(DeviceType::CUDA, &cuda::mul_kernel);
  mul_scalar_stub.set(DeviceType::CUDA, &cuda::mul_scalar_kernel);
  div_stub.set(DeviceType::CUDA, &cuda::div_kernel);
  div_scalar_stub.set(DeviceType::CUDA, &cuda::div_scalar_kernel);
  rdiv_scalar_stub.set(DeviceType::CUDA, &cuda::rdiv_scalar_kernel);
  pow_stub.set(DeviceType::CUDA, &cuda::pow_kernel);
  pow_scalar_stub.set(DeviceType::CUDA, &cuda::pow_scalar_kernel);
  rpow_scalar_stub.set(DeviceType::CUDA, &cuda::rpow_scalar_kernel);
  maximum_stub.set(DeviceType::CUDA, &cuda::maximum_kernel);
  minimum_stub.set(DeviceType::CUDA, &cuda::minimum_kernel);
  extremum_weight_stub.set(DeviceType::CUDA, &cuda::extremum_weight_kernel);
  lerp_stub.set(DeviceType::CUDA, &cuda::lerp_kernel);
  where_stub.set(DeviceType::CUDA, &cuda::where_kernel);
  where_scalar_stub.set(DeviceType::CUDA, &cuda::where_scalar_kernel);
  addcmul_stub.set(DeviceType::CUDA, &cuda::addcmul_kernel);
  addcdiv_stub.set(DeviceType::CUDA, &cuda::addcdiv_kernel);
  unary_stub.set(DeviceType::CUDA, &cuda::unary_kernel);
  clamp_stub.set(DeviceType::CUDA, &cuda::clamp_kernel);
  clamp_mask_stub.set(DeviceType::CUDA, &cuda::clamp_mask_kernel);
  activation_backward_stub.set(DeviceType::CUDA, &cuda::activation_backward_kernel);
  compare_stub.set(DeviceType::CUDA, &cuda::compare_kernel);
  compare_scalar_stub.set(DeviceType::CUDA, &cuda::compare_scalar_kernel);
  logical_not_stub.set(DeviceType::CUDA, &cuda::logical_not_kernel);
  copy_stub.set(DeviceType::CUDA, &copy_cuda);
  fill_stub.set(DeviceType::CUDA, &cuda::fill_kernel);
  arange_stub.set(DeviceType::CUDA, &cuda::arange_kernel);
  linspace_stub.set(DeviceType::CUDA, &cuda::linspace_kernel);
  copy_across_stub.set(DeviceType::CUDA, &cuda::copy_across);
}

}  // namespace dp::backend
