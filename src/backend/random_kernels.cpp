// The stubs of the random kernel interface (random_kernels.h).
#include "backend/random_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(dropout_forward_kernel, "dropout", KernelCoverage::All);
DP_DEFINE_KERNEL(dropout_apply_kernel, "dropout", KernelCoverage::All);
DP_DEFINE_KERNEL(random_fill_kernel, "random fill (rand, randn, uniform_, normal_, bernoulli_)", KernelCoverage::All);
DP_DEFINE_KERNEL(randint_fill_kernel, "randint", KernelCoverage::All);
DP_DEFINE_KERNEL(randperm_fill_kernel, "randperm", KernelCoverage::All);

}  // namespace dp::backend
