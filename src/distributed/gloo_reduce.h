#pragma once
// The element-wise reductions handed to gloo::allreduce (and to the reduce-scatter ring). Ours, not
// gloo's: Debian builds gloo without AVX, and its functions are not written to vectorise; these are
// plain loops over __restrict pointers that the compiler turns into SIMD code.
#include <cstddef>
#include "dp/core/dtype.h"
#include "dp/distributed/process_group.h"

namespace dp::distributed::detail {

// gloo's reduce-function shape: out[i] = a[i] (op) b[i] for i < n; out may be a or b.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// The dtype a tensor travels and is reduced in: float32 for Float16/BFloat16 (accumulating in float,
// one rounding at the end), the tensor's own dtype otherwise. `compressed` (allreduce_compressed):
// Float16/BFloat16 travel as they are.
inline DType wire_dtype(DType dtype, bool compressed = false) { return !compressed && (dtype == kFloat16 || dtype == kBFloat16) ? kFloat32 : dtype; }

// The function for `op` on elements of `wire`. Avg reduces as Sum (the caller scales afterwards).
// Bool: Sum and Max are "or", Min and Product are "and". Float16/BFloat16 (only on the compressed
// path) combine each pair in float and round once.
ReduceFn reduce_function(DType wire, ReduceOp op);

// data[i] *= factor for a floating buffer: Avg's division by the group size.
void scale_in_place(void* data, DType wire, size_t n, double factor);

}  // namespace dp::distributed::detail
