// The stubs of the LSTM kernel interface (lstm_kernels.h).
#include "backend/lstm_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(lstm_layer_forward_kernel, "lstm_layer", KernelCoverage::CudaOnly);
DP_DEFINE_KERNEL(lstm_layer_backward_kernel, "lstm_layer backward", KernelCoverage::CudaOnly);

}  // namespace dp::backend
