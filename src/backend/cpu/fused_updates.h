#pragma once
// The CPU backend's fused optimizer updates: one pass over a parameter's contiguous memory, no
// temporaries. Raw pointers and scalars (backend/optim_kernels.h); the optimizers reach them
// through that interface's sgd_update / adam_update, one call per (device, dtype) of a group.
//
// Each element goes through exactly PyTorch 1.13's foreach=False sequence of tensor ops, with
// the same roundings: scalars are cast to the element type as ATen casts them, `add(x, alpha)`
// is a fused multiply-add (ATen's vectorised add is fmadd), addcmul is fma(value * t1, t2, self),
// addcdiv is self + value * t1 / t2, division is true division. So float32 and float64 results
// equal PyTorch's bit for bit (checked against its goldens).
//
// float16/bfloat16 (parameter, gradient and state all in that dtype, as PyTorch keeps the state of
// half parameters): each element is widened to float32, goes through the same sequence in float32
// (scalars cast to float32), and every value written back is rounded once when stored. Values
// computed in this step are used unrounded (PyTorch's fused/opmath semantics, not its per-op
// roundings of the foreach=False path).
#include <cstdint>
#include "backend/optim_kernels.h"
#include "dp/core/half.h"

namespace dp::backend::cpu::fused {

using backend::AdamScalars;
using backend::SgdScalars;

// param -= lr * d, d = grad (+ weight decay, momentum, Nesterov). momentum_buffer: n elements,
// unused when momentum == 0; when !buffer_initialized it is overwritten with d (PyTorch's
// first-step clone) instead of being decayed.
void sgd_update(float* param, const float* grad, float* momentum_buffer, bool buffer_initialized, int64_t n, const SgdScalars& s);
void sgd_update(double* param, const double* grad, double* momentum_buffer, bool buffer_initialized, int64_t n, const SgdScalars& s);
void sgd_update(BFloat16* param, const BFloat16* grad, BFloat16* momentum_buffer, bool buffer_initialized, int64_t n, const SgdScalars& s);
void sgd_update(Half* param, const Half* grad, Half* momentum_buffer, bool buffer_initialized, int64_t n, const SgdScalars& s);

// One Adam/AdamW update. max_exp_avg_sq is used only with amsgrad.
void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t n, const AdamScalars& s);
void adam_update(double* param, const double* grad, double* exp_avg, double* exp_avg_sq, double* max_exp_avg_sq, int64_t n, const AdamScalars& s);
void adam_update(BFloat16* param, const BFloat16* grad, BFloat16* exp_avg, BFloat16* exp_avg_sq, BFloat16* max_exp_avg_sq, int64_t n,
                 const AdamScalars& s);
void adam_update(Half* param, const Half* grad, Half* exp_avg, Half* exp_avg_sq, Half* max_exp_avg_sq, int64_t n, const AdamScalars& s);

}  // namespace dp::backend::cpu::fused
