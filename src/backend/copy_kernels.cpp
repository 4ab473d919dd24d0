// The stubs of the copy kernel interface (copy_kernels.h).
#include "backend/copy_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(copy_kernel, "copy_", KernelCoverage::All);
DP_DEFINE_KERNEL(fill_kernel, "fill_", KernelCoverage::All);
DP_DEFINE_KERNEL(copy_across_kernel, "copy_ between devices", KernelCoverage::CudaOnly);
DP_DEFINE_KERNEL(arange_kernel, "arange", KernelCoverage::All);
DP_DEFINE_KERNEL(linspace_kernel, "linspace", KernelCoverage::All);

}  // namespace dp::backend
