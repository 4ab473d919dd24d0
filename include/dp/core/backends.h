#pragma once
// Switches for the libraries behind the CPU's matrix products, like torch.backends.
#include <string>

namespace dp::backends::onednn {

// oneDNN computes bfloat16 matrix products (matmul, mm, bmm, addmm, linear and their backward) on
// the CPU's AMX-BF16 tiles or AVX512-BF16 instructions, with float32 accumulation and one rounding
// to bfloat16 (the role of torch.backends.mkldnn). Without it, or switched off, such a product is
// converted to float32, computed with OpenBLAS and rounded once: the same numerics, far slower on a
// CPU with those units (docs/mixed-precision.md).
//
// Whether this build has oneDNN and oneDNN has a kernel for this CPU other than its reference
// loops (on a CPU without AVX-512 it may not).
bool is_available();
// On by default; the environment variable DP_ONEDNN=0 makes the default off. Takes effect from the
// next product; process-wide.
void set_enabled(bool on);
bool enabled();
// The oneDNN kernel a bfloat16 product runs ("brg:avx512_core_amx_bf16" on a Sapphire Rapids), or ""
// when bfloat16 products do not use oneDNN now.
std::string implementation();

}  // namespace dp::backends::onednn
