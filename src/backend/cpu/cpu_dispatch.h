#pragma once
// Instruction sets chosen at run time, for portable builds (DP_NATIVE=OFF: -march=x86-64, which
// any x86-64 CPU runs). Two forms of GCC's function multiversioning, one idea:
//
//  - DP_TARGET_CLONES on the hot loops the compiler vectorises by itself (the element-wise loops,
//    the optimizers' SGD loop): GCC compiles the function three times, for x86-64 (SSE2),
//    x86-64-v3 (AVX2, FMA, F16C) and x86-64-v4 (AVX-512), and an ifunc resolver picks one the first
//    time the program is loaded, from the CPU's cpuid. Everything the loop calls is inlined into
//    each copy (flatten), so the whole loop body gets the wider instructions.
//  - Loops written with AVX2/FMA intrinsics (reduce_vec.h's exp and row max, Adam's update) are
//    compiled with DP_TARGET_AVX2 and called only when cpu_has_avx2_fma() says so; the scalar
//    twin otherwise.
//
// A native build (-march=native on a CPU with AVX2, or any build with -mavx2 -mfma) needs none of
// this: __AVX2__ is defined, the clones are off and cpu_has_avx2_fma() is the constant true, so the
// code is what it was without dispatch. The intrinsics paths give the same bits as their scalar
// twins (the FMAs are written out on both sides). The clones may differ from the x86-64 copy in the
// last bit where GCC contracts a * b + c into one FMA (its default in C++), exactly as a native
// build differs from a portable one. DP_CPU_DISPATCH=0 (cmake -DDP_CPU_DISPATCH=OFF) turns the dispatch off: the
// portable build then runs the x86-64 code everywhere.
#ifndef DP_CPU_DISPATCH
#define DP_CPU_DISPATCH 1
#endif

#if DP_CPU_DISPATCH && defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__) && !defined(__AVX2__)
#define DP_X86_DISPATCH 1
#define DP_TARGET_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#define DP_TARGET_AVX2 __attribute__((target("avx2,fma")))
// For a loop driver whose inner loops live in lambdas and helpers the compiler leaves out of line
// (run_reduce): everything it calls is inlined into each copy, so the inner loops are cloned too.
#define DP_TARGET_CLONES_FLATTEN __attribute__((flatten)) DP_TARGET_CLONES
#else
#define DP_X86_DISPATCH 0
#define DP_TARGET_CLONES
#define DP_TARGET_AVX2
#define DP_TARGET_CLONES_FLATTEN
#endif

// The AVX2 + FMA intrinsics paths are compiled: always on x86-64 with dispatch, else when the
// build targets AVX2 + FMA.
#if (DP_X86_DISPATCH || (defined(__AVX2__) && defined(__FMA__))) && !defined(__CUDACC__)
#define DP_HAVE_AVX2_PATHS 1
#include <immintrin.h>
#else
#define DP_HAVE_AVX2_PATHS 0
#endif

namespace dp::backend::cpu {

// True when the AVX2 + FMA paths may run on this CPU (asked once per process).
inline bool cpu_has_avx2_fma() {
#if defined(__AVX2__) && defined(__FMA__)
  return true;
#elif DP_X86_DISPATCH
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace dp::backend::cpu
