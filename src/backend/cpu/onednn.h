#pragma once
// The only door to oneDNN (the one file that includes dnnl.hpp is onednn.cpp): bfloat16 GEMMs on
// oneDNN's matmul primitive, which uses the CPU's AMX-BF16 tiles or AVX512-BF16 dot products where
// it has them. bfloat16 operands, float32 accumulation, the result rounded once to bfloat16 (to
// nearest even), as the float32 detour it replaces.
//
// Every call keeps to blas.h's thread policy: oneDNN itself always computes in the calling thread
// (its OpenMP thread count is held at one around each call), a call from a device worker runs in
// that worker, and a large call from a host thread is cut into tiles that host_threads() threads of
// the host GEMM pool take one by one. Primitives are created once per shape and cached.
//
// Matrices are row-major with blas.h's conventions (trans = stored transposed, ld its leading
// dimension). Every function returns false, having written nothing, when the call cannot take this
// path: a build without oneDNN, the path switched off (set_enabled, DP_ONEDNN=0), or no
// non-reference oneDNN kernel for this CPU; the caller then uses its float32 path.
#include <cstdint>

#include "dp/core/half.h"

namespace dp::backend::cpu::onednn {

// C[m, n] (row stride ldc) = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C, plus bias[j] on
// every row when bias != nullptr (a contiguous [n] vector; then alpha must be 1). beta == 0: C is
// not read. k >= 1.
bool gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda, const BFloat16* b,
               int64_t ldb, float beta, BFloat16* c, int64_t ldc, const BFloat16* bias = nullptr);
// `count` products of one shape: C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i].
bool gemm_bf16_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* const* a, int64_t lda,
                       const BFloat16* const* b, int64_t ldb, float beta, BFloat16* const* c, int64_t ldc, int64_t count);

// Whether this build has oneDNN (DP_HAVE_ONEDNN).
bool compiled();
// Whether bfloat16 GEMMs take this path now: compiled, switched on, and oneDNN has a kernel other
// than its reference loops for this CPU (probed once).
bool active();
// The switch (default on; the environment variable DP_ONEDNN=0 makes the default off). Takes
// effect from the next call; process-wide.
void set_enabled(bool on);
bool enabled();
// The oneDNN kernel a bfloat16 GEMM uses on this CPU ("brg:avx512_core_amx_bf16"), whether or not
// the path is switched on; "" without oneDNN or when it has only its reference loops here.
const char* implementation();
// How many GEMMs (a batched call counts its products) this path has computed, and how many
// primitives it has created, in this process (for tests).
int64_t calls();
int64_t primitives_created();

}  // namespace dp::backend::cpu::onednn
