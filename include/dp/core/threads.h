#pragma once
// Threads used by one matrix product (an OpenBLAS GEMM), like torch.set_num_threads for GEMMs.
//
// The setting applies to GEMMs issued from ordinary (host) threads; default: OPENBLAS_NUM_THREADS,
// else every core. A large host GEMM is cut into tiles that the calling thread and n - 1 helper
// threads take one at a time; the helpers sleep between GEMMs (they never spin), so a machine
// whose cores other processes hold slows a GEMM in proportion to the cores lost. GEMMs issued from
// a device worker thread (cpu:0 … cpu:N-1, where DataParallel replicas run) always run in that
// thread alone, so concurrent replicas do not fight over cores.
namespace dp {

// n >= 1, else ValueError. Takes effect from the next GEMM; process-wide.
void set_num_threads(int n);
int get_num_threads();

}  // namespace dp
