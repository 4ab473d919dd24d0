// The stubs of the device-transfer kernel interface (comm_kernels.h).
#include "backend/comm_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(collective_usable, "broadcast_coalesced");
DP_DEFINE_KERNEL(collective_broadcast, "broadcast_coalesced");
DP_DEFINE_KERNEL(collective_reduce, "reduce_add_coalesced");
DP_DEFINE_KERNEL(peer_access, "reduce_add_coalesced");
DP_DEFINE_KERNEL(sum_into, "reduce_add_coalesced");

}  // namespace dp::backend
