// The stubs of the index kernel interface (index_kernels.h) and its host-side helpers.
#include "backend/index_kernels.h"

#include <string>
#include "backend/dispatch.h"
#include "dp/core/errors.h"

namespace dp::backend {

DP_DEFINE_KERNEL(index_select_kernel, "index_select", KernelCoverage::All);
DP_DEFINE_KERNEL(index_add_kernel, "index_add", KernelCoverage::All);
DP_DEFINE_KERNEL(gather_kernel, "gather", KernelCoverage::All);
DP_DEFINE_KERNEL(scatter_add_kernel, "scatter_add", KernelCoverage::All);
DP_DEFINE_KERNEL(check_indices_kernel, "index check", KernelCoverage::All);
DP_DEFINE_KERNEL(embedding_forward_kernel, "embedding", KernelCoverage::All);
DP_DEFINE_KERNEL(embedding_backward_kernel, "embedding backward", KernelCoverage::CudaOnly);
DP_DEFINE_KERNEL(one_hot_kernel, "one_hot", KernelCoverage::All);
DP_DEFINE_KERNEL(masked_fill_kernel, "masked_fill", KernelCoverage::All);

namespace {

template <typename I>
void read_values(const Tensor& index, std::vector<int64_t>& out) {
  const I* p = static_cast<const I*>(index.data_ptr());
  strided_walk<1>(index.sizes(), {index.strides()}, [&](int64_t i, const std::array<int64_t, 1>& off) { out[i] = static_cast<int64_t>(p[off[0]]); });
}

}  // namespace

std::vector<int64_t> read_index_values(const char* op, const Tensor& index) {
  std::vector<int64_t> out(index.numel());
  backend::dispatch_index(index.dtype(), op, [&]<typename I>() { read_values<I>(index, out); });
  return out;
}

void index_out_of_range(const char* op, int64_t v, int64_t dim, int64_t size) {
  throw IndexError(
      detail::str(op, ": index ", v, " is out of bounds for dimension ", dim, " with size ", size,
                  size > 0 ? detail::str(" (valid range [0, ", size - 1, "])") : std::string(" (the dimension is empty: no index is valid)")));
}

std::vector<int64_t> read_indices(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  std::vector<int64_t> v = read_index_values(op, index);
  for (int64_t x : v)
    if (x < 0 || x >= size) index_out_of_range(op, x, dim, size);
  return v;
}

}  // namespace dp::backend
