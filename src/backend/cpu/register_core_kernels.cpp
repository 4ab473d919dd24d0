// Kernels of the CPU backend that still live in src/backend/cpu (moving into this folder family by
// family), registered into the kernel interfaces' stubs.
#include "backend/random_kernels.h"
#include "backend/cpu/conv_kernels.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/norm_kernels.h"
#include "backend/cpu/pool_kernels.h"
#include "backend/cpu/reduce.h"

namespace dp::backend::cpu {

void register_core_kernels() {
  DP_REGISTER_KERNEL(CPU, dropout_forward_kernel);
  DP_REGISTER_KERNEL(CPU, dropout_apply_kernel);

  DP_REGISTER_KERNEL(CPU, copy_kernel);
  DP_REGISTER_KERNEL(CPU, fill_kernel);
  DP_REGISTER_KERNEL(CPU, arange_kernel);
  DP_REGISTER_KERNEL(CPU, linspace_kernel);

  DP_REGISTER_KERNEL(CPU, sum_kernel);
  DP_REGISTER_KERNEL(CPU, mean_kernel);
  DP_REGISTER_KERNEL(CPU, minmax_kernel);
  DP_REGISTER_KERNEL(CPU, minmax_index_kernel);
  DP_REGISTER_KERNEL(CPU, var_kernel);
  DP_REGISTER_KERNEL(CPU, logsumexp_kernel);
  DP_REGISTER_KERNEL(CPU, norm_kernel);
  DP_REGISTER_KERNEL(CPU, softmax_kernel);
  DP_REGISTER_KERNEL(CPU, softmax_backward_kernel);
  DP_REGISTER_KERNEL(CPU, sum_rows_kernel);

  DP_REGISTER_KERNEL(CPU, layer_norm_kernel);
  DP_REGISTER_KERNEL(CPU, layer_norm_backward_kernel);
  DP_REGISTER_KERNEL(CPU, batch_norm_stats_kernel);
  DP_REGISTER_KERNEL(CPU, batch_norm_apply_kernel);
  DP_REGISTER_KERNEL(CPU, batch_norm_backward_kernel);

  DP_REGISTER_KERNEL(CPU, max_pool2d_kernel);
  DP_REGISTER_KERNEL(CPU, max_pool2d_backward_kernel);
  DP_REGISTER_KERNEL(CPU, avg_pool2d_kernel);
  DP_REGISTER_KERNEL(CPU, avg_pool2d_backward_kernel);
  DP_REGISTER_KERNEL(CPU, adaptive_avg_pool2d_kernel);
  DP_REGISTER_KERNEL(CPU, adaptive_avg_pool2d_backward_kernel);

  DP_REGISTER_KERNEL(CPU, conv2d_forward_kernel);
  DP_REGISTER_KERNEL(CPU, conv2d_backward_kernel);
}

}  // namespace dp::backend::cpu
