#pragma once
// Helpers of the reduction ops' backward formulas and device checks (defined in src/ops/reduction.cpp).
#include <vector>
#include "dp/core/tensor.h"

namespace dp::ops {

// A gradient of a reduction's result reshaped to the keepdim shape (size-1 reduced dims), so it
// broadcasts against the input. Differentiable (dp ops).
Tensor grad_to_keepdim(const Tensor& g, IntArrayRef in_shape, const std::vector<bool>& mask, bool keepdim);
// NotImplementedError naming `op` for a tensor outside host memory, where a path of the op reads
// its values on the host.
void check_cpu_tensor(const char* op, const Tensor& t);

}  // namespace dp::ops
