// CUDA instantiations of the binary element-wise kernels (backend/elementwise_impl.h on the
// CUDA launcher, cuda/launch.cuh).
#include "backend/elementwise_impl.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.cuh"

namespace dp::backend::cuda {

using detail::CudaLaunch;
namespace impl = backend::impl;

void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) { impl::add_kernel<CudaLaunch>(out, a, b, alpha); }
void add_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s, const Scalar& alpha) {
  impl::add_scalar_kernel<CudaLaunch>(out, a, s, alpha);
}
void rsub_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) { impl::rsub_scalar_kernel<CudaLaunch>(out, a, s); }
void mul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { impl::mul_kernel<CudaLaunch>(out, a, b); }
void mul_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) { impl::mul_scalar_kernel<CudaLaunch>(out, a, s); }
void div_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { impl::div_kernel<CudaLaunch>(out, a, b); }
void div_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) { impl::div_scalar_kernel<CudaLaunch>(out, a, s); }
void rdiv_scalar_kernel(const Tensor& out, const Scalar& s, const Tensor& a) { impl::rdiv_scalar_kernel<CudaLaunch>(out, s, a); }
void pow_kernel(const Tensor& out, const Tensor& a, const Tensor& e) { impl::pow_kernel<CudaLaunch>(out, a, e); }
void pow_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& e) { impl::pow_scalar_kernel<CudaLaunch>(out, a, e); }
void rpow_scalar_kernel(const Tensor& out, const Scalar& base, const Tensor& e) { impl::rpow_scalar_kernel<CudaLaunch>(out, base, e); }
void maximum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { impl::maximum_kernel<CudaLaunch>(out, a, b); }
void minimum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { impl::minimum_kernel<CudaLaunch>(out, a, b); }
void extremum_weight_kernel(const Tensor& out, const Tensor& a, const Tensor& b, bool is_max) {
  impl::extremum_weight_kernel<CudaLaunch>(out, a, b, is_max);
}
void lerp_kernel(const Tensor& out, const Tensor& a, const Tensor& end, const Scalar& weight) { impl::lerp_kernel<CudaLaunch>(out, a, end, weight); }
void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) { impl::where_kernel<CudaLaunch>(out, cond, a, b); }
void where_scalar_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Scalar& b) {
  impl::where_scalar_kernel<CudaLaunch>(out, cond, a, b);
}
void addcmul_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  impl::addcmul_kernel<CudaLaunch>(out, self, a, b, value);
}
void addcdiv_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  impl::addcdiv_kernel<CudaLaunch>(out, self, a, b, value);
}

}  // namespace dp::backend::cuda
