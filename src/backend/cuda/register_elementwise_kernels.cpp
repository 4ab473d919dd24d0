// The CUDA backend's element-wise kernels, copies and fills, registered into the stubs of
// backend/elementwise_kernels.h and backend/copy_kernels.h (called from register_cuda_kernels()).
#include "backend/copy_kernels.h"
#include "backend/elementwise_kernels.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/transfer.h"

namespace dp::backend::cuda {
namespace {

// A copy with a CUDA operand: on one device the CUDA copy kernel, else a transfer (host <-> device,
// or between devices), which does not wait where it need not.
void copy_kernel(const Tensor& dst, const Tensor& src) {
  if (dst.device() == src.device())
    cuda::copy_on_device(dst, src);
  else
    cuda::copy_across_kernel(dst, src, false);
}

}  // namespace

void register_cuda_elementwise_kernels() {
  DP_REGISTER_KERNEL(CUDA, add_kernel);
  DP_REGISTER_KERNEL(CUDA, add_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, rsub_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, mul_kernel);
  DP_REGISTER_KERNEL(CUDA, mul_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, div_kernel);
  DP_REGISTER_KERNEL(CUDA, div_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, rdiv_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, pow_kernel);
  DP_REGISTER_KERNEL(CUDA, pow_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, rpow_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, maximum_kernel);
  DP_REGISTER_KERNEL(CUDA, minimum_kernel);
  DP_REGISTER_KERNEL(CUDA, extremum_weight_kernel);
  DP_REGISTER_KERNEL(CUDA, lerp_kernel);
  DP_REGISTER_KERNEL(CUDA, where_kernel);
  DP_REGISTER_KERNEL(CUDA, where_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, addcmul_kernel);
  DP_REGISTER_KERNEL(CUDA, addcdiv_kernel);
  DP_REGISTER_KERNEL(CUDA, unary_kernel);
  DP_REGISTER_KERNEL(CUDA, clamp_kernel);
  DP_REGISTER_KERNEL(CUDA, clamp_mask_kernel);
  DP_REGISTER_KERNEL(CUDA, activation_backward_kernel);
  DP_REGISTER_KERNEL(CUDA, compare_kernel);
  DP_REGISTER_KERNEL(CUDA, compare_scalar_kernel);
  DP_REGISTER_KERNEL(CUDA, logical_not_kernel);
  DP_REGISTER_KERNEL(CUDA, copy_kernel);
  DP_REGISTER_KERNEL(CUDA, fill_kernel);
  DP_REGISTER_KERNEL(CUDA, arange_kernel);
  DP_REGISTER_KERNEL(CUDA, linspace_kernel);
  DP_REGISTER_KERNEL(CUDA, copy_across_kernel);
}

}  // namespace dp::backend::cuda
