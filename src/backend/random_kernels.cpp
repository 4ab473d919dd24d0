// The stubs of the random kernel interface (random_kernels.h).
#include "backend/random_kernels.h"

namespace dp::backend {

DP_DEFINE_KERNEL(dropout_forward, "dropout");
DP_DEFINE_KERNEL(dropout_apply, "dropout");
DP_DEFINE_KERNEL(random_fill, "random fill (rand, randn, uniform_, normal_, bernoulli_)");
DP_DEFINE_KERNEL(randint_fill, "randint");
DP_DEFINE_KERNEL(randperm_fill, "randperm");

}  // namespace dp::backend
