// The stubs of the matrix product kernel interface (linalg_kernels.h).
#include "backend/linalg_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(matmul_kernel, "matmul", KernelCoverage::All);
DP_DEFINE_KERNEL(matmul_bias_kernel, "matmul", KernelCoverage::All);
DP_DEFINE_KERNEL(dot_kernel, "dot", KernelCoverage::All);
DP_DEFINE_KERNEL(outer_kernel, "outer", KernelCoverage::All);
DP_DEFINE_KERNEL(linear_forward_kernel, "linear", KernelCoverage::CpuOnly);
DP_DEFINE_KERNEL(linear_backward_kernel, "linear", KernelCoverage::CpuOnly);

}  // namespace dp::backend
