// The stubs of the element-wise kernel interface (elementwise_kernels.h).
#include "backend/elementwise_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(add_kernel, "add", KernelCoverage::All);
DP_DEFINE_KERNEL(add_scalar_kernel, "add", KernelCoverage::All);
DP_DEFINE_KERNEL(rsub_scalar_kernel, "rsub", KernelCoverage::All);
DP_DEFINE_KERNEL(mul_kernel, "mul", KernelCoverage::All);
DP_DEFINE_KERNEL(mul_scalar_kernel, "mul", KernelCoverage::All);
DP_DEFINE_KERNEL(div_kernel, "div", KernelCoverage::All);
DP_DEFINE_KERNEL(div_scalar_kernel, "div", KernelCoverage::All);
DP_DEFINE_KERNEL(rdiv_scalar_kernel, "div", KernelCoverage::All);
DP_DEFINE_KERNEL(pow_kernel, "pow", KernelCoverage::All);
DP_DEFINE_KERNEL(pow_scalar_kernel, "pow", KernelCoverage::All);
DP_DEFINE_KERNEL(rpow_scalar_kernel, "pow", KernelCoverage::All);
DP_DEFINE_KERNEL(maximum_kernel, "maximum", KernelCoverage::All);
DP_DEFINE_KERNEL(minimum_kernel, "minimum", KernelCoverage::All);
DP_DEFINE_KERNEL(extremum_weight_kernel, "maximum / minimum backward", KernelCoverage::All);
DP_DEFINE_KERNEL(lerp_kernel, "lerp", KernelCoverage::All);
DP_DEFINE_KERNEL(where_kernel, "where", KernelCoverage::All);
DP_DEFINE_KERNEL(where_scalar_kernel, "where", KernelCoverage::All);
DP_DEFINE_KERNEL(addcmul_kernel, "addcmul", KernelCoverage::All);
DP_DEFINE_KERNEL(addcdiv_kernel, "addcdiv", KernelCoverage::All);
DP_DEFINE_KERNEL(unary_kernel, "unary element-wise ops (neg, abs, exp, log, sqrt, relu, sigmoid, tanh, ...)", KernelCoverage::All);
DP_DEFINE_KERNEL(clamp_kernel, "clamp", KernelCoverage::All);
DP_DEFINE_KERNEL(clamp_mask_kernel, "clamp backward", KernelCoverage::All);
DP_DEFINE_KERNEL(activation_backward_kernel, "activation backward", KernelCoverage::All);
DP_DEFINE_KERNEL(compare_kernel, "comparisons (eq, ne, lt, le, gt, ge)", KernelCoverage::All);
DP_DEFINE_KERNEL(compare_scalar_kernel, "comparisons (eq, ne, lt, le, gt, ge)", KernelCoverage::All);
DP_DEFINE_KERNEL(logical_not_kernel, "logical_not", KernelCoverage::All);

}  // namespace dp::backend
