#pragma once
// Matrix-product settings of the CUDA backend, as torch.backends.cuda.matmul. Available when
// dparallel is built with the CUDA backend (DP_HAVE_CUDA), in its library dparallel::cuda; needs no
// CUDA headers.
//
// TF32: float32 products on CUDA (mm, bmm, addmm, matmul, linear, the LSTM's GEMMs) may round
// their inputs to TF32 (10-bit mantissa) and use the tensor cores, accumulating in float32: several
// times faster on Ampere and later, with a relative error around 1e-3 instead of 1e-6. Off by
// default, as in PyTorch since 1.12. The setting is process-wide (an atomic) and applies to the
// products queued after it changes. float64, float16 and bfloat16 products are not affected
// (half-precision products always accumulate in float32), and neither are dot products.
namespace dp::cuda {

void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace dp::cuda
