#include "dp/core/threads.h"
#include "core/kernels/blas.h"

namespace dp {

void set_num_threads(int n) { kernels::blas::set_host_threads(n); }
int get_num_threads() { return kernels::blas::host_threads(); }

}  // namespace dp
