#pragma once
// Which parameters share a bucket (PyTorch's compute_bucket_assignment_by_size): parameters in
// reverse registration order, one open bucket per (dtype, device); a bucket closes when it reaches
// its limit (the first bucket of each kind first_mb, later ones cap_mb). Buckets are ordered by
// the position of their first parameter in that reverse order, which is roughly the order backward
// fills them.
#include <cstdint>
#include <vector>
#include "dp/core/tensor.h"

namespace dp::distributed {

struct BucketPlan {
  DType dtype;
  Device device;
  std::vector<size_t> params;    // indices into the parameter list, in the bucket's order
  std::vector<int64_t> offsets;  // each one's first element in the flat buffer
  int64_t numel = 0;
};

std::vector<BucketPlan> plan_buckets(const std::vector<Tensor>& params, double first_mb, double cap_mb);

}  // namespace dp::distributed
