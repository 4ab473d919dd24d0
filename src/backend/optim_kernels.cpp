// The stubs of the optimizer kernel interface (optim_kernels.h).
#include "backend/optim_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(sgd_update, "SGD step");
DP_DEFINE_KERNEL(adam_update, "Adam step");
DP_DEFINE_KERNEL(check_host_scalar_step, "Adam step");

}  // namespace dp::backend
