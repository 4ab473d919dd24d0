// The CUDA backend's capabilities (backend/capabilities.h), and the kernels of the op families
// converted to the kernel table, adapted to the interfaces' signatures; registered from
// register_cuda_kernels() (register_kernels.cpp).
#include "backend/capabilities.h"

namespace dp::backend {

void register_cuda_ops_kernels() {
  // The nn kernels (norm_pool.cu, cuDNN convolutions, loss.cu) compute float16 / bfloat16 in float32.
  set_capabilities(DeviceType::CUDA, Capabilities{.kernels = true, .half_nn = true});
}

}  // namespace dp::backend
