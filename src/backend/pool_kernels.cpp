// The stubs of the pooling kernel interface (pool_kernels.h).
#include "backend/pool_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(max_pool2d_kernel, "max_pool2d", KernelCoverage::All);
DP_DEFINE_KERNEL(max_pool2d_backward_kernel, "max_pool2d backward", KernelCoverage::All);
DP_DEFINE_KERNEL(avg_pool2d_kernel, "avg_pool2d", KernelCoverage::All);
DP_DEFINE_KERNEL(avg_pool2d_backward_kernel, "avg_pool2d backward", KernelCoverage::All);
DP_DEFINE_KERNEL(adaptive_avg_pool2d_kernel, "adaptive_avg_pool2d", KernelCoverage::All);
DP_DEFINE_KERNEL(adaptive_avg_pool2d_backward_kernel, "adaptive_avg_pool2d backward", KernelCoverage::All);

}  // namespace dp::backend
