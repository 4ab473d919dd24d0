// The CUDA backend's reductions, softmax, normalisation, pooling and convolution kernels,
// registered into the stubs of backend/reduce_kernels.h, norm_kernels.h, pool_kernels.h and
// conv_kernels.h (called from register_cuda_kernels()).
#include "backend/conv_kernels.h"
#include "backend/norm_kernels.h"
#include "backend/pool_kernels.h"
#include "backend/reduce_kernels.h"
#include "backend/cuda/conv.h"
#include "backend/cuda/norm_pool.h"
#include "backend/cuda/reduce.h"

namespace dp::backend::cuda {

void register_cuda_reduce_kernels() {
  DP_REGISTER_KERNEL(CUDA, sum_kernel);
  DP_REGISTER_KERNEL(CUDA, mean_kernel);
  DP_REGISTER_KERNEL(CUDA, minmax_kernel);
  DP_REGISTER_KERNEL(CUDA, minmax_index_kernel);
  DP_REGISTER_KERNEL(CUDA, var_kernel);
  DP_REGISTER_KERNEL(CUDA, logsumexp_kernel);
  DP_REGISTER_KERNEL(CUDA, norm_kernel);
  DP_REGISTER_KERNEL(CUDA, softmax_kernel);
  DP_REGISTER_KERNEL(CUDA, softmax_backward_kernel);

  DP_REGISTER_KERNEL(CUDA, layer_norm_kernel);
  DP_REGISTER_KERNEL(CUDA, layer_norm_backward_kernel);
  DP_REGISTER_KERNEL(CUDA, batch_norm_stats_kernel);
  DP_REGISTER_KERNEL(CUDA, batch_norm_apply_kernel);
  DP_REGISTER_KERNEL(CUDA, batch_norm_backward_kernel);

  DP_REGISTER_KERNEL(CUDA, max_pool2d_kernel);
  DP_REGISTER_KERNEL(CUDA, max_pool2d_backward_kernel);
  DP_REGISTER_KERNEL(CUDA, avg_pool2d_kernel);
  DP_REGISTER_KERNEL(CUDA, avg_pool2d_backward_kernel);
  DP_REGISTER_KERNEL(CUDA, adaptive_avg_pool2d_kernel);
  DP_REGISTER_KERNEL(CUDA, adaptive_avg_pool2d_backward_kernel);

  DP_REGISTER_KERNEL(CUDA, conv2d_forward_kernel);
  DP_REGISTER_KERNEL(CUDA, conv2d_backward_kernel);
}

}  // namespace dp::backend::cuda
