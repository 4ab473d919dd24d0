// The stubs of the loss kernel interface (loss_kernels.h).
#include "backend/loss_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(pointwise_loss_forward_kernel, "mse_loss, l1_loss, binary_cross_entropy(_with_logits)", KernelCoverage::All);
DP_DEFINE_KERNEL(pointwise_loss_backward_kernel, "mse_loss, l1_loss, binary_cross_entropy(_with_logits) backward", KernelCoverage::All);
DP_DEFINE_KERNEL(nll_loss_forward_kernel, "nll_loss", KernelCoverage::All);
DP_DEFINE_KERNEL(nll_loss_backward_kernel, "nll_loss backward", KernelCoverage::All);
DP_DEFINE_KERNEL(cross_entropy_index_forward_kernel, "cross_entropy", KernelCoverage::All);
DP_DEFINE_KERNEL(cross_entropy_index_backward_kernel, "cross_entropy backward", KernelCoverage::All);
DP_DEFINE_KERNEL(cross_entropy_prob_forward_kernel, "cross_entropy", KernelCoverage::All);
DP_DEFINE_KERNEL(cross_entropy_prob_backward_kernel, "cross_entropy backward", KernelCoverage::All);

}  // namespace dp::backend
