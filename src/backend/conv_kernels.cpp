// The stubs of the convolution kernel interface (conv_kernels.h).
#include "backend/conv_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(conv2d_forward_stub, "conv2d");
DP_DEFINE_KERNEL(conv2d_backward_stub, "conv2d backward");

}  // namespace dp::backend
