#pragma once
// The fused LSTM layer (dp::lstm_layer) on a CUDA device: the CPU backend's algorithm (src/ops/rnn_lstm.cpp) with
// cuBLAS GEMMs (cuda/blas.h) and the fused gate kernels of cuda/lstm.cu, queued on the current
// stream of the input's device.
//  - Forward: gates [T*B, 4H] = x @ W_ih^T + (b_ih + b_hh) in one GEMM (the bias by the GEMM's
//    epilogue); per step one GEMM accumulating h_{t-1} @ W_hh^T into that step's gates and one
//    kernel (activations in place, c_t, h_t).
//  - Backward: per step one kernel (gate gradients, dc) and one GEMM (dh); then dx, dW_ih, dW_hh as
//    GEMMs over the whole sequence and db as dgates^T @ ones (a GEMM with fp32 accumulation, no
//    TF32), so no reduction kernel is needed.
// Arguments as checked by rnn_detail::check_lstm_layer_args, made contiguous by the caller.
#include "backend/lstm_kernels.h"

namespace dp::backend::cuda {

// The CUDA backend's backend::lstm_layer_forward_kernel / lstm_layer_backward_kernel (backend/lstm_kernels.h).
void lstm_layer_forward_kernel(const backend::LstmDims& d, bool reverse, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                               const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, backend::ForwardBuffers& buf);
void lstm_layer_backward_kernel(const backend::LstmDims& d, bool reverse, backend::BackwardArgs& a);

}  // namespace dp::backend::cuda
