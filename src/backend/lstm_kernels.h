#pragma once
// The kernel interface of the fused padded LSTM layer on CUDA (dp::lstm_layer, src/ops/rnn_lstm.cpp):
// one direction of one layer, forward and backward (BPTT), implemented by the CUDA backend
// (src/backend/cuda/lstm.cpp: cuBLAS GEMMs and the fused gate kernels of cuda/lstm.cu). The CPU
// backend runs every recurrent layer, this one included, through the generic kernels of
// rnn_kernels.h (src/backend/cpu/rnn_layer.cpp), the same algorithm. The algorithm and the
// workspace layout are in the header comment of src/ops/rnn_lstm.cpp.
#include <cstdint>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// Sizes of one lstm_layer call, after its arguments were checked.
struct LstmDims {
  int64_t T, B, I, H;
  bool bias;
};

// The fused op's buffers: all contiguous.
struct ForwardBuffers {
  Tensor gates, out, cells, hn, cn;  // gates [T, B, 4H] (activations after the run), cells [T, B, H]
};
struct BackwardArgs {
  Tensor x, h0, c0, w_ih, w_hh, acts, cells, out;  // contiguous
  Tensor d_out, d_hn, d_cn;                        // contiguous, may be undefined
  Tensor dx, dh0, dc0, dw_ih, dw_hh, db;           // outputs; dx/dw_ih/dw_hh/db undefined if not needed
  bool need_dh0 = false;
};

// Arguments as checked by rnn_detail::check_lstm_layer_args (float32 or float64, one device),
// made contiguous by the caller; b_ih / b_hh undefined when !d.bias. Fills buf (allocated by the
// caller with the shapes above).
using LstmLayerForward = void(const LstmDims& d, bool reverse, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                              const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, ForwardBuffers& buf);
// Writes a's outputs (the defined ones; dh0 and dc0 always, as BPTT's running buffers).
using LstmLayerBackward = void(const LstmDims& d, bool reverse, BackwardArgs& a);

DP_DECLARE_KERNEL(lstm_layer_forward_kernel, LstmLayerForward);
DP_DECLARE_KERNEL(lstm_layer_backward_kernel, LstmLayerBackward);

}  // namespace dp::backend
