// The stubs of the LSTM kernel interface (lstm_kernels.h).
#include "backend/lstm_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(lstm_layer_forward, "lstm_layer");
DP_DEFINE_KERNEL(lstm_layer_backward, "lstm_layer backward");

}  // namespace dp::backend
