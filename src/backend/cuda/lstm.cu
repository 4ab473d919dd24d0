// The LSTM's fused gate kernels (see lstm_kernels.h): one thread per (batch row, hidden unit), the
// four gates of a unit read and written by that thread, so the in-place updates never race.
// 32-bit indices (a step's gates are limited to 2^31 - 1 elements).
#include <cuda_runtime.h>
#include <climits>
#include "backend/elementwise_math.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/lstm_kernels.h"

namespace dp::backend::cuda::detail {
namespace {

using backend::m_tanh;
using backend::sigmoid_f;

template <typename T>
__global__ void __launch_bounds__(kThreads) gates_forward_kernel(uint32_t n, uint32_t H, T* gates, const T* c_prev, T* c_out, T* h_out) {
  for (uint32_t idx = blockIdx.x * kThreads + threadIdx.x; idx < n; idx += gridDim.x * kThreads) {
    const uint32_t b = idx / H, j = idx - b * H;
    T* g = gates + b * 4 * H + j;
    const T i = sigmoid_f(g[0]), f = sigmoid_f(g[H]), gg = m_tanh(g[2 * H]), o = sigmoid_f(g[3 * H]);
    const T c = f * c_prev[idx] + i * gg;
    g[0] = i;
    g[H] = f;
    g[2 * H] = gg;
    g[3 * H] = o;
    c_out[idx] = c;
    h_out[idx] = o * m_tanh(c);
  }
}

template <typename T, bool HasDOut>
__global__ void __launch_bounds__(kThreads)
    gates_backward_kernel(uint32_t n, uint32_t H, const T* acts, const T* c_cur, const T* c_prev, const T* d_out, const T* dh, T* dc, T* dgates) {
  for (uint32_t idx = blockIdx.x * kThreads + threadIdx.x; idx < n; idx += gridDim.x * kThreads) {
    const uint32_t b = idx / H, j = idx - b * H, base = b * 4 * H + j;
    const T i = acts[base], f = acts[base + H], g = acts[base + 2 * H], o = acts[base + 3 * H];
    const T tc = m_tanh(c_cur[idx]);
    T dht = dh[idx];
    if constexpr (HasDOut) dht += d_out[idx];
    const T dct = dc[idx] + dht * o * (T(1) - tc * tc);
    dgates[base] = dct * g * i * (T(1) - i);
    dgates[base + H] = dct * c_prev[idx] * f * (T(1) - f);
    dgates[base + 2 * H] = dct * i * (T(1) - g * g);
    dgates[base + 3 * H] = dht * tc * o * (T(1) - o);
    dc[idx] = dct * f;
  }
}

// Elements of one step, checked against the 32-bit index math (4 gates per element).
uint32_t step_elements(const char* what, int64_t B, int64_t H) {
  DP_CHECK(4 * B * H <= INT_MAX, NotImplementedError, what, ": a step of batch ", B, " and hidden size ", H,
           " has more gate values than the CUDA kernel's 32-bit indexing allows (2^31 - 1)");
  return static_cast<uint32_t>(B * H);
}

template <typename F>
void with_type(DType dtype, const char* what, F&& f) {
  if (dtype == kFloat32)
    f(float{});
  else if (dtype == kFloat64)
    f(double{});
  else
    throw DTypeError(dp::detail::str(what, ": expected float32 or float64, got ", dtype_name(dtype)));
}

}  // namespace

void lstm_gates_forward(DType dtype, int64_t B, int64_t H, void* gates, const void* c_prev, void* c_out, void* h_out, const Stream& stream) {
  const uint32_t n = step_elements("lstm_layer", B, H);
  if (n == 0) return;
  DeviceGuard guard(stream.device());
  with_type(dtype, "lstm_layer", [&]<typename T>(T) {
    gates_forward_kernel<T><<<grid_for(n, stream.device()), kThreads, 0, stream.handle()>>>(
        n, static_cast<uint32_t>(H), static_cast<T*>(gates), static_cast<const T*>(c_prev), static_cast<T*>(c_out), static_cast<T*>(h_out));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void lstm_gates_backward(DType dtype, int64_t B, int64_t H, const void* acts, const void* c_cur, const void* c_prev, const void* d_out,
                         const void* dh, void* dc, void* dgates, const Stream& stream) {
  const uint32_t n = step_elements("lstm_layer backward", B, H);
  if (n == 0) return;
  DeviceGuard guard(stream.device());
  with_type(dtype, "lstm_layer backward", [&]<typename T>(T) {
    const unsigned blocks = grid_for(n, stream.device());
    const auto h = static_cast<uint32_t>(H);
    if (d_out)
      gates_backward_kernel<T, true><<<blocks, kThreads, 0, stream.handle()>>>(
          n, h, static_cast<const T*>(acts), static_cast<const T*>(c_cur), static_cast<const T*>(c_prev), static_cast<const T*>(d_out),
          static_cast<const T*>(dh), static_cast<T*>(dc), static_cast<T*>(dgates));
    else
      gates_backward_kernel<T, false><<<blocks, kThreads, 0, stream.handle()>>>(n, h, static_cast<const T*>(acts), static_cast<const T*>(c_cur),
                                                                                static_cast<const T*>(c_prev), nullptr, static_cast<const T*>(dh),
                                                                                static_cast<T*>(dc), static_cast<T*>(dgates));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dp::backend::cuda::detail
