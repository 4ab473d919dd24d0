// The stubs of the pooling kernel interface (pool_kernels.h).
#include "backend/pool_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(max_pool2d_stub, "max_pool2d");
DP_DEFINE_KERNEL(max_pool2d_backward_stub, "max_pool2d backward");
DP_DEFINE_KERNEL(avg_pool2d_stub, "avg_pool2d");
DP_DEFINE_KERNEL(avg_pool2d_backward_stub, "avg_pool2d backward");
DP_DEFINE_KERNEL(adaptive_avg_pool2d_stub, "adaptive_avg_pool2d");
DP_DEFINE_KERNEL(adaptive_avg_pool2d_backward_stub, "adaptive_avg_pool2d backward");

}  // namespace dp::backend
