#pragma once
// The reduction behind reduce_add_coalesced and DataParallel's gradient sum.
#include <cstddef>
#include <vector>
#include "dp/core/tensor.h"
#include "dp/parallel/comm.h"

namespace dp::parallel::detail {

// Shape and dtype of one summed tensor.
struct TensorSpec {
  Shape sizes;
  DType dtype = kFloat32;
};

// result[i] = sum over j of inputs[j][i] on `destination`, where undefined inputs are absent terms
// (all absent: zeros of specs[i]). Inputs must match specs[i] (callers check). A tensor with a single
// contribution already on the destination is returned as is; every other result is fresh and
// contiguous. Sums run in device order; large reductions are split across the inputs' workers.
// With inputs or destination off the host (comm_device.h): tensors go in buckets of at most buffer_size bytes,
// and the results are views into one fresh buffer per bucket.
std::vector<Tensor> reduce_sum(const std::vector<std::vector<Tensor>>& inputs, const std::vector<TensorSpec>& specs, Device destination,
                               size_t buffer_size = kDefaultBufferSize);

}  // namespace dp::parallel::detail
