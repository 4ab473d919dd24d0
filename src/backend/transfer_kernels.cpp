// The stub of the transfer kernel interface (transfer_kernels.h).
#include "backend/transfer_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(copy_across, "to");

}  // namespace dp::backend
