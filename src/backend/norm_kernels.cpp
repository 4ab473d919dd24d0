// The stubs of the normalization kernel interface (norm_kernels.h).
#include "backend/norm_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(layer_norm_kernel, "layer_norm", KernelCoverage::All);
DP_DEFINE_KERNEL(layer_norm_backward_kernel, "layer_norm backward", KernelCoverage::All);
DP_DEFINE_KERNEL(batch_norm_stats_kernel, "batch_norm", KernelCoverage::All);
DP_DEFINE_KERNEL(batch_norm_apply_kernel, "batch_norm", KernelCoverage::All);
DP_DEFINE_KERNEL(batch_norm_backward_kernel, "batch_norm backward", KernelCoverage::All);
DP_DEFINE_KERNEL(batch_norm_update_running_kernel, "batch_norm", KernelCoverage::All);
DP_DEFINE_KERNEL(batch_norm_invstd_kernel, "batch_norm", KernelCoverage::All);

}  // namespace dp::backend
