#pragma once
// Marks functions that the CPU and (later) the CUDA backend both compile, so one definition of the
// element math serves both.
#if defined(__CUDACC__)
#define DP_HOST_DEVICE __host__ __device__
#define DP_INLINE __forceinline__
// Unrolls the next loop in device code; the host compiler, which has no such pragma, sees nothing.
#define DP_UNROLL _Pragma("unroll")
#else
#define DP_HOST_DEVICE
#define DP_INLINE inline __attribute__((always_inline))
#define DP_UNROLL
#endif
