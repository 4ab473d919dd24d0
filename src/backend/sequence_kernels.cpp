// The stubs of the sequence ops' kernel interface (sequence_kernels.h).
#include "backend/sequence_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(triangle_kernel, "tril/triu");
DP_DEFINE_KERNEL(sort_kernel, "sort");
DP_DEFINE_KERNEL(topk_kernel, "topk");
DP_DEFINE_KERNEL(cumsum_kernel, "cumsum");
DP_DEFINE_KERNEL(multinomial_kernel, "multinomial");
DP_DEFINE_KERNEL(multinomial_check, "multinomial");

}  // namespace dp::backend
