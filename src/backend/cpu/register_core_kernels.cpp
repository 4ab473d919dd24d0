// Kernels of the CPU backend that still live in src/backend/cpu (moving into this folder family by
// family), registered into the kernel interfaces' stubs.
#include "backend/random_kernels.h"
#include "backend/cpu/conv_kernels.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/norm_kernels.h"
#include "backend/cpu/pool_kernels.h"
#include "backend/cpu/reduce.h"

namespace dp::backend {

void register_cpu_core_kernels() {
  dropout_forward.set(DeviceType::CPU, &kernels::dropout_forward_kernel);
  dropout_apply.set(DeviceType::CPU, &kernels::dropout_apply_kernel);

  copy_stub.set(DeviceType::CPU, &kernels::copy_kernel_cpu);
  fill_stub.set(DeviceType::CPU, &kernels::fill_kernel_cpu);
  arange_stub.set(DeviceType::CPU, &kernels::arange_kernel_cpu);
  linspace_stub.set(DeviceType::CPU, &kernels::linspace_kernel_cpu);

  sum_stub.set(DeviceType::CPU, &kernels::sum_kernel_cpu);
  mean_stub.set(DeviceType::CPU, &kernels::mean_kernel_cpu);
  minmax_stub.set(DeviceType::CPU, &kernels::minmax_kernel_cpu);
  minmax_index_stub.set(DeviceType::CPU, &kernels::minmax_index_kernel_cpu);
  var_stub.set(DeviceType::CPU, &kernels::var_kernel_cpu);
  logsumexp_stub.set(DeviceType::CPU, &kernels::logsumexp_kernel_cpu);
  norm_stub.set(DeviceType::CPU, &kernels::norm_kernel_cpu);
  softmax_stub.set(DeviceType::CPU, &kernels::softmax_kernel_cpu);
  softmax_backward_stub.set(DeviceType::CPU, &kernels::softmax_backward_kernel_cpu);
  sum_rows_stub.set(DeviceType::CPU, &kernels::sum_rows_kernel_cpu);

  layer_norm_stub.set(DeviceType::CPU, &kernels::layer_norm_kernel_cpu);
  layer_norm_backward_stub.set(DeviceType::CPU, &kernels::layer_norm_backward_kernel_cpu);
  batch_norm_stats_stub.set(DeviceType::CPU, &kernels::batch_norm_stats_kernel_cpu);
  batch_norm_apply_stub.set(DeviceType::CPU, &kernels::batch_norm_apply_kernel_cpu);
  batch_norm_backward_stub.set(DeviceType::CPU, &kernels::batch_norm_backward_kernel_cpu);

  max_pool2d_stub.set(DeviceType::CPU, &kernels::max_pool2d_kernel_cpu);
  max_pool2d_backward_stub.set(DeviceType::CPU, &kernels::max_pool2d_backward_kernel_cpu);
  avg_pool2d_stub.set(DeviceType::CPU, &kernels::avg_pool2d_kernel_cpu);
  avg_pool2d_backward_stub.set(DeviceType::CPU, &kernels::avg_pool2d_backward_kernel_cpu);
  adaptive_avg_pool2d_stub.set(DeviceType::CPU, &kernels::adaptive_avg_pool2d_kernel_cpu);
  adaptive_avg_pool2d_backward_stub.set(DeviceType::CPU, &kernels::adaptive_avg_pool2d_backward_kernel_cpu);

  conv2d_forward_stub.set(DeviceType::CPU, &kernels::conv2d_forward_kernel_cpu);
  conv2d_backward_stub.set(DeviceType::CPU, &kernels::conv2d_backward_kernel_cpu);
}

}  // namespace dp::backend
