// The stubs of the fused attention kernel interface (attention_kernels.h).
#include "backend/attention_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(attention_forward_kernel, "scaled_dot_product_attention", KernelCoverage::CpuOnly);
DP_DEFINE_KERNEL(attention_backward_kernel, "scaled_dot_product_attention backward", KernelCoverage::CpuOnly);

}  // namespace dp::backend
