// The stubs of the normalization kernel interface (norm_kernels.h).
#include "backend/norm_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(layer_norm_stub, "layer_norm");
DP_DEFINE_KERNEL(layer_norm_backward_stub, "layer_norm backward");
DP_DEFINE_KERNEL(batch_norm_stats_stub, "batch_norm");
DP_DEFINE_KERNEL(batch_norm_apply_stub, "batch_norm");
DP_DEFINE_KERNEL(batch_norm_backward_stub, "batch_norm backward");
DP_DEFINE_KERNEL(batch_norm_update_running, "batch_norm");
DP_DEFINE_KERNEL(batch_norm_invstd, "batch_norm");

}  // namespace dp::backend
