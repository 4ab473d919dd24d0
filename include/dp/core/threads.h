#pragma once
// Threads used by one matrix product (an OpenBLAS GEMM), like torch.set_num_threads for GEMMs.
//
// The setting applies to GEMMs issued from ordinary (host) threads; default: OpenBLAS's own
// default (OPENBLAS_NUM_THREADS, else every core). GEMMs issued from a device worker thread
// (cpu:0 … cpu:N-1, where DataParallel replicas run) always use one thread each, so concurrent
// replicas do not fight over cores; a multi-threaded host GEMM never overlaps another GEMM.
namespace dp {

// n >= 1, else ValueError. Takes effect from the next GEMM; process-wide.
void set_num_threads(int n);
int get_num_threads();

}  // namespace dp
