// The stubs of the optimizer kernel interface (optim_kernels.h).
#include "backend/optim_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(sgd_update_kernel, "SGD step", KernelCoverage::All);
DP_DEFINE_KERNEL(adam_update_kernel, "Adam step", KernelCoverage::All);
DP_DEFINE_KERNEL(check_host_scalar_step_kernel, "Adam step", KernelCoverage::All);

}  // namespace dp::backend
