// The stubs of the convolution kernel interface (conv_kernels.h).
#include "backend/conv_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(conv2d_forward_kernel, "conv2d", KernelCoverage::All);
DP_DEFINE_KERNEL(conv2d_backward_kernel, "conv2d backward", KernelCoverage::All);

}  // namespace dp::backend
