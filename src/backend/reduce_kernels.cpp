// The stubs of the reduction kernel interface (reduce_kernels.h).
#include "backend/reduce_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(sum_stub, "sum");
DP_DEFINE_KERNEL(mean_stub, "mean");
DP_DEFINE_KERNEL(minmax_stub, "max / min");
DP_DEFINE_KERNEL(minmax_index_stub, "max / min / argmax / argmin");
DP_DEFINE_KERNEL(var_stub, "var / std");
DP_DEFINE_KERNEL(logsumexp_stub, "logsumexp");
DP_DEFINE_KERNEL(norm_stub, "norm");
DP_DEFINE_KERNEL(softmax_stub, "softmax / log_softmax");
DP_DEFINE_KERNEL(softmax_backward_stub, "softmax / log_softmax backward");
DP_DEFINE_KERNEL(sum_rows_stub, "sum_to");

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
