// The stubs of the element-wise kernel interface (elementwise_kernels.h).
#include "backend/elementwise_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(add_stub, "add");
DP_DEFINE_KERNEL(add_scalar_stub, "add");
DP_DEFINE_KERNEL(rsub_scalar_stub, "rsub");
DP_DEFINE_KERNEL(mul_stub, "mul");
DP_DEFINE_KERNEL(mul_scalar_stub, "mul");
DP_DEFINE_KERNEL(div_stub, "div");
DP_DEFINE_KERNEL(div_scalar_stub, "div");
DP_DEFINE_KERNEL(rdiv_scalar_stub, "div");
DP_DEFINE_KERNEL(pow_stub, "pow");
DP_DEFINE_KERNEL(pow_scalar_stub, "pow");
DP_DEFINE_KERNEL(rpow_scalar_stub, "pow");
DP_DEFINE_KERNEL(maximum_stub, "maximum");
DP_DEFINE_KERNEL(minimum_stub, "minimum");
DP_DEFINE_KERNEL(extremum_weight_stub, "maximum / minimum backward");
DP_DEFINE_KERNEL(lerp_stub, "lerp");
DP_DEFINE_KERNEL(where_stub, "where");
DP_DEFINE_KERNEL(where_scalar_stub, "where");
DP_DEFINE_KERNEL(addcmul_stub, "addcmul");
DP_DEFINE_KERNEL(addcdiv_stub, "addcdiv");
DP_DEFINE_KERNEL(unary_stub, "unary element-wise ops (neg, abs, exp, log, sqrt, relu, sigmoid, tanh, ...)");
DP_DEFINE_KERNEL(clamp_stub, "clamp");
DP_DEFINE_KERNEL(clamp_mask_stub, "clamp backward");
DP_DEFINE_KERNEL(activation_backward_stub, "activation backward");
DP_DEFINE_KERNEL(compare_stub, "comparisons (eq, ne, lt, le, gt, ge)");
DP_DEFINE_KERNEL(compare_scalar_stub, "comparisons (eq, ne, lt, le, gt, ge)");
DP_DEFINE_KERNEL(logical_not_stub, "logical_not");

}  // namespace dp::backend
