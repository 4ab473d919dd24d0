#pragma once
#include <string>

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

// OpenBLAS chooses its kernels for the CPU once, when it is loaded. On a CPU it does not recognise
// (Debian's OpenBLAS 0.3.21 on Sapphire Rapids virtual machines) it falls back to its SSE3
// "Prescott" kernels: measured here, a 64x256x784 GEMM took 2.8 ms on them and 0.62 ms with
// OPENBLAS_CORETYPE=SkylakeX, and PyTorch, which uses the same library, is affected alike.
// Returns the OPENBLAS_CORETYPE that selects kernels for what this CPU supports ("SkylakeX" for
// AVX-512, "Haswell" for AVX2 + FMA) when OpenBLAS runs older ones, else "" (also when
// OPENBLAS_CORETYPE is already set: the user chose).
std::string blas_coretype_suggestion();

// For a program's main(), before anything else: when blas_coretype_suggestion() is not empty,
// sets OPENBLAS_CORETYPE to it and executes the program again (/proc/self/exe, same arguments and
// environment otherwise), so that OpenBLAS loads with the right kernels; child processes inherit
// the setting. Returns when nothing needed doing or the re-execution failed (the program then goes
// on with the kernels it has). dp-train and dp-run call it.
void reexec_for_blas_kernels(char** argv);

}  // namespace dp
