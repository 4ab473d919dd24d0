// The stubs of the copy kernel interface (copy_kernels.h).
#include "backend/copy_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(copy_stub, "copy_");
DP_DEFINE_KERNEL(fill_stub, "fill_");
DP_DEFINE_KERNEL(copy_across_stub, "copy_ between devices");
DP_DEFINE_KERNEL(arange_stub, "arange");
DP_DEFINE_KERNEL(linspace_stub, "linspace");

}  // namespace dp::backend
