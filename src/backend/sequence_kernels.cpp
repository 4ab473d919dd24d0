// The stubs of the sequence ops' kernel interface (sequence_kernels.h).
#include "backend/sequence_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(triangle_kernel, "tril/triu", KernelCoverage::CpuOnly);
DP_DEFINE_KERNEL(sort_kernel, "sort", KernelCoverage::CpuOnly);
DP_DEFINE_KERNEL(topk_kernel, "topk", KernelCoverage::CpuOnly);
DP_DEFINE_KERNEL(cumsum_kernel, "cumsum", KernelCoverage::CpuOnly);
DP_DEFINE_KERNEL(multinomial_kernel, "multinomial", KernelCoverage::CpuOnly);
DP_DEFINE_KERNEL(multinomial_check_kernel, "multinomial", KernelCoverage::CpuOnly);

}  // namespace dp::backend
