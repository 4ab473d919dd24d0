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

namespace dp::backend {

void register_cuda_reduce_kernels() {
  sum_stub.set(DeviceType::CUDA, &cuda::sum_kernel);
  mean_stub.set(DeviceType::CUDA, &cuda::mean_kernel);
  minmax_stub.set(DeviceType::CUDA, &cuda::minmax_kernel);
  minmax_index_stub.set(DeviceType::CUDA, &cuda::minmax_index_kernel);
  var_stub.set(DeviceType::CUDA, &cuda::var_kernel);
  logsumexp_stub.set(DeviceType::CUDA, &cuda::logsumexp_kernel);
  norm_stub.set(DeviceType::CUDA, &cuda::norm_kernel);
  softmax_stub.set(DeviceType::CUDA, &cuda::softmax_kernel);
  softmax_backward_stub.set(DeviceType::CUDA, &cuda::softmax_backward_kernel);

  layer_norm_stub.set(DeviceType::CUDA, &cuda::layer_norm_kernel);
  layer_norm_backward_stub.set(DeviceType::CUDA, &cuda::layer_norm_backward_kernel);
  batch_norm_stats_stub.set(DeviceType::CUDA, &cuda::batch_norm_stats_kernel);
  batch_norm_apply_stub.set(DeviceType::CUDA, &cuda::batch_norm_apply_kernel);
  batch_norm_backward_stub.set(DeviceType::CUDA, &cuda::batch_norm_backward_kernel);

  max_pool2d_stub.set(DeviceType::CUDA, &cuda::max_pool2d_kernel);
  max_pool2d_backward_stub.set(DeviceType::CUDA, &cuda::max_pool2d_backward_kernel);
  avg_pool2d_stub.set(DeviceType::CUDA, &cuda::avg_pool2d_kernel);
  avg_pool2d_backward_stub.set(DeviceType::CUDA, &cuda::avg_pool2d_backward_kernel);
  adaptive_avg_pool2d_stub.set(DeviceType::CUDA, &cuda::adaptive_avg_pool2d_kernel);
  adaptive_avg_pool2d_backward_stub.set(DeviceType::CUDA, &cuda::adaptive_avg_pool2d_backward_kernel);

  conv2d_forward_stub.set(DeviceType::CUDA, &cuda::conv2d_forward_kernel);
  conv2d_backward_stub.set(DeviceType::CUDA, &cuda::conv2d_backward_kernel);
}

}  // namespace dp::backend
