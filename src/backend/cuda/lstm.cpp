// The fused LSTM layer on CUDA devices (see lstm.h): the orchestration, on the host.
#include "backend/cuda/lstm.h"

#include <cuda_runtime_api.h>

#include "backend/tensor_nograd.h"
#include "dp/cuda/check.h"
#include "backend/cuda/runtime_api.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/lstm_kernels.h"

namespace dp::backend::cuda {
namespace {

// Byte pointer to element `i` of t's memory (t contiguous).
char* at(const Tensor& t, int64_t i) { return static_cast<char*>(t.data_ptr()) + i * static_cast<int64_t>(t.element_size()); }

// dst <- n elements at src (or zeros when src is null), on the stream.
void copy_or_zero(void* dst, const void* src, int64_t n, size_t es, const Stream& s) {
  if (n == 0) return;
  const size_t bytes = static_cast<size_t>(n) * es;
  if (src)
    DP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.handle()));
  else
    DP_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s.handle()));
}

}  // namespace

void lstm_layer_forward_kernel(const backend::LstmDims& d, bool reverse, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                               const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, backend::ForwardBuffers& buf) {
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const Stream stream = current_stream(dev);
  const DType dt = x.dtype();
  const int64_t H = d.H, B = d.B, I = d.I, G = 4 * H, BH = B * H, BG = B * G, rows = d.T * B;
  // The input projection of the whole sequence: gates [rows, G] = x [rows, I] @ W_ih^T (+ both biases).
  const Tensor gates2 = backend::restride_nograd(buf.gates, {rows, G}, {G, 1});
  const Tensor x2 = backend::restride_nograd(x, {rows, I}, {I, 1});
  const Tensor w_ih_t = backend::restride_nograd(w_ih, {I, G}, {1, I});
  if (d.bias) {
    Tensor bsum = make_empty({G}, dt, x.device());
    add_kernel(bsum, b_ih, b_hh, 1);
    matmul_bias_kernel(gates2, x2, w_ih_t, bsum, "lstm_layer");
  } else {
    matmul_into(gates2, x2, w_ih_t, 1.0, 0.0, "lstm_layer");
  }
  int64_t t = 0;
  for (int64_t s = 0; s < d.T; ++s) {
    t = reverse ? d.T - 1 - s : s;
    const int64_t tp = reverse ? t + 1 : t - 1;
    const void* hp = s == 0 ? h0.data_ptr() : at(buf.out, tp * BH);
    const void* cp = s == 0 ? c0.data_ptr() : at(buf.cells, tp * BH);
    void* gt = at(buf.gates, t * BG);
    gemm(dev, dt, false, true, B, G, H, 1.0, hp, H, w_hh.data_ptr(), H, 1.0, gt, G, "lstm_layer");
    detail::lstm_gates_forward(dt, B, H, gt, cp, at(buf.cells, t * BH), at(buf.out, t * BH), stream);
  }
  copy_or_zero(buf.hn.data_ptr(), at(buf.out, t * BH), BH, x.element_size(), stream);
  copy_or_zero(buf.cn.data_ptr(), at(buf.cells, t * BH), BH, x.element_size(), stream);
}

void lstm_layer_backward_kernel(const backend::LstmDims& d, bool reverse, backend::BackwardArgs& a) {
  const int dev = a.acts.device().index;
  DeviceGuard guard(dev);
  const Stream stream = current_stream(dev);
  const DType dt = a.acts.dtype();
  const size_t es = a.acts.element_size();
  const int64_t H = d.H, B = d.B, I = d.I, G = 4 * H, BH = B * H, BG = B * G, rows = d.T * B;
  const Tensor dgates = make_empty({d.T, B, G}, dt, a.acts.device());
  void* dh = a.dh0.data_ptr();
  void* dc = a.dc0.data_ptr();
  copy_or_zero(dh, a.d_hn.defined() ? a.d_hn.data_ptr() : nullptr, BH, es, stream);
  copy_or_zero(dc, a.d_cn.defined() ? a.d_cn.data_ptr() : nullptr, BH, es, stream);
  const char* op = "lstm_layer backward";
  for (int64_t s = d.T - 1; s >= 0; --s) {
    const int64_t t = reverse ? d.T - 1 - s : s;
    const int64_t tp = reverse ? t + 1 : t - 1;
    const void* cp = s == 0 ? a.c0.data_ptr() : at(a.cells, tp * BH);
    const void* d_out = a.d_out.defined() ? at(a.d_out, t * BH) : nullptr;
    detail::lstm_gates_backward(dt, B, H, at(a.acts, t * BG), at(a.cells, t * BH), cp, d_out, dh, dc, at(dgates, t * BG), stream);
    if (s > 0 || a.need_dh0) gemm(dev, dt, false, false, B, H, G, 1.0, at(dgates, t * BG), G, a.w_hh.data_ptr(), H, 0.0, dh, H, op);
  }
  const void* dG = dgates.data_ptr();
  if (a.dx.defined()) gemm(dev, dt, false, false, rows, I, G, 1.0, dG, G, a.w_ih.data_ptr(), I, 0.0, a.dx.data_ptr(), I, op);
  if (a.dw_ih.defined()) gemm(dev, dt, true, false, G, I, rows, 1.0, dG, G, a.x.data_ptr(), I, 0.0, a.dw_ih.data_ptr(), I, op);
  if (a.dw_hh.defined()) {
    // h_prev of step t is output[t -/+ 1] (a contiguous block of T-1 steps) or h0 for the first step.
    const int64_t first = reverse ? d.T - 1 : 0;
    const void* dG_rest = reverse ? dG : at(dgates, BG);
    const void* h_rest = reverse ? at(a.out, BH) : a.out.data_ptr();
    gemm(dev, dt, true, false, G, H, (d.T - 1) * B, 1.0, dG_rest, G, h_rest, H, 0.0, a.dw_hh.data_ptr(), H, op);
    gemm(dev, dt, true, false, G, H, B, 1.0, at(dgates, first * BG), G, a.h0.data_ptr(), H, d.T > 1 ? 1.0 : 0.0, a.dw_hh.data_ptr(), H, op);
  }
  if (a.db.defined()) {
    // Column sums of dgates as dgates^T @ ones: a GEMM, exact fp32 (no TF32) like a reduction.
    const Tensor ones = make_empty({rows}, dt, a.acts.device());
    fill_kernel(ones, 1);
    gemm(dev, dt, true, false, G, 1, rows, 1.0, dG, G, ones.data_ptr(), 1, 0.0, a.db.data_ptr(), 1, op, /*tf32_ok=*/false);
  }
}

}  // namespace dp::backend::cuda
