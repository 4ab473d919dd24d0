// The stubs of the fused attention kernel interface (attention_kernels.h).
#include "backend/attention_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(attention_forward, "scaled_dot_product_attention");
DP_DEFINE_KERNEL(attention_backward, "scaled_dot_product_attention backward");

}  // namespace dp::backend
