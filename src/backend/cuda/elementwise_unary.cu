// CUDA instantiations of the unary, clamp, comparison and activation-backward kernels
#pragma nv_diag_suppress 186  // "pointless comparison of unsigned integer with zero" in the shared sign functor
// (backend/elementwise_impl.h on the CUDA launcher, cuda/launch.cuh).
#include "backend/elementwise_impl.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.cuh"

namespace dp::backend::cuda {

using detail::CudaLaunch;
namespace impl = backend::impl;

void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& a) { impl::unary_kernel<CudaLaunch>(op, out, a); }
void clamp_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  impl::clamp_kernel<CudaLaunch>(out, a, lo, hi);
}
void clamp_mask_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  impl::clamp_mask_kernel<CudaLaunch>(out, a, lo, hi);
}
void activation_backward_kernel(ActGrad op, const Tensor& out, const Tensor& g, const Tensor& xy) {
  impl::activation_backward_kernel<CudaLaunch>(op, out, g, xy);
}
void compare_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Tensor& b) { impl::compare_kernel<CudaLaunch>(op, out, a, b); }
void compare_scalar_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Scalar& s) { impl::compare_scalar_kernel<CudaLaunch>(op, out, a, s); }
void logical_not_kernel(const Tensor& out, const Tensor& a) { impl::logical_not_kernel<CudaLaunch>(out, a); }

}  // namespace dp::backend::cuda
