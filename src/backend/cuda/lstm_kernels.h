#pragma once
// The LSTM's fused gate kernels (cuda/lstm.cu), on raw contiguous device memory of dtype float32 or
// float64, queued on `stream`. Row b of gates/acts/dgates holds the four gate blocks (i, f, g, o) of
// H values; c/h/dh/dc rows hold H values. The math is the CPU's (backend/elementwise_math.h).
#include <cstdint>
#include "dp/core/dtype.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"

namespace dp::backend::cuda::detail {

// gates [B, 4H]: pre-activations in, activations out; writes c_out = f * c_prev + i * g and
// h_out = o * tanh(c_out) [B, H].
void lstm_gates_forward(DType dtype, int64_t B, int64_t H, void* gates, const void* c_prev, void* c_out, void* h_out, const Stream& stream);

// From the activations acts [B, 4H], c_cur = c_t and c_prev [B, H], the running dh (plus d_out at
// this step unless null) and dc: writes the pre-activation gradients dgates [B, 4H] and turns dc into
// the gradient w.r.t. c_{t-1}.
void lstm_gates_backward(DType dtype, int64_t B, int64_t H, const void* acts, const void* c_cur, const void* c_prev, const void* d_out,
                         const void* dh, void* dc, void* dgates, const Stream& stream);

}  // namespace dp::backend::cuda::detail
