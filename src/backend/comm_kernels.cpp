// The stubs of the device-transfer kernel interface (comm_kernels.h).
#include "backend/comm_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(collective_usable_kernel, "broadcast_coalesced", KernelCoverage::CudaOnly);
DP_DEFINE_KERNEL(collective_broadcast_kernel, "broadcast_coalesced", KernelCoverage::CudaOnly);
DP_DEFINE_KERNEL(collective_reduce_kernel, "reduce_add_coalesced", KernelCoverage::CudaOnly);
DP_DEFINE_KERNEL(peer_access_kernel, "reduce_add_coalesced", KernelCoverage::CudaOnly);
DP_DEFINE_KERNEL(sum_into_kernel, "reduce_add_coalesced", KernelCoverage::All);

}  // namespace dp::backend
