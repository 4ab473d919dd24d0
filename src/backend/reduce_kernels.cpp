// The stubs of the reduction kernel interface (reduce_kernels.h).
#include "backend/reduce_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(sum_kernel, "sum", KernelCoverage::All);
DP_DEFINE_KERNEL(mean_kernel, "mean", KernelCoverage::All);
DP_DEFINE_KERNEL(minmax_kernel, "max / min", KernelCoverage::All);
DP_DEFINE_KERNEL(minmax_index_kernel, "max / min / argmax / argmin", KernelCoverage::All);
DP_DEFINE_KERNEL(var_kernel, "var / std", KernelCoverage::All);
DP_DEFINE_KERNEL(logsumexp_kernel, "logsumexp", KernelCoverage::All);
DP_DEFINE_KERNEL(norm_kernel, "norm", KernelCoverage::All);
DP_DEFINE_KERNEL(softmax_kernel, "softmax / log_softmax", KernelCoverage::All);
DP_DEFINE_KERNEL(softmax_backward_kernel, "softmax / log_softmax backward", KernelCoverage::All);
DP_DEFINE_KERNEL(sum_rows_kernel, "sum_to", KernelCoverage::CpuOnly);

SoftmaxGeometry softmax_geometry(const Tensor& t, int64_t dim) {
  SoftmaxGeometry g;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim)
      g.outer *= t.sizes()[d];
    else if (d == dim)
      g.dsize = t.sizes()[d];
    else
      g.inner *= t.sizes()[d];
  }
  return g;
}

}  // namespace dp::backend
