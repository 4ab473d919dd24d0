// The stubs of the loss kernel interface (loss_kernels.h).
#include "backend/loss_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(pointwise_loss_forward, "mse_loss, l1_loss, binary_cross_entropy(_with_logits)");
DP_DEFINE_KERNEL(pointwise_loss_backward, "mse_loss, l1_loss, binary_cross_entropy(_with_logits) backward");
DP_DEFINE_KERNEL(nll_loss_forward, "nll_loss");
DP_DEFINE_KERNEL(nll_loss_backward, "nll_loss backward");
DP_DEFINE_KERNEL(cross_entropy_index_forward, "cross_entropy");
DP_DEFINE_KERNEL(cross_entropy_index_backward, "cross_entropy backward");
DP_DEFINE_KERNEL(cross_entropy_prob_forward, "cross_entropy");
DP_DEFINE_KERNEL(cross_entropy_prob_backward, "cross_entropy backward");

}  // namespace dp::backend
