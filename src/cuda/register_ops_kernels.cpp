// The CUDA backend's kernels of the matrix product, LSTM, normalization, random and transfer kernel
// interfaces (src/backend/*_kernels.h), and its capabilities; registered from
// register_cuda_kernels() (register_kernels.cpp). The device work is in the .cu files and the host
// files beside them; what is here adapts it to the interfaces' signatures.
#include "backend/capabilities.h"
#include "backend/linalg_kernels.h"
#include "backend/lstm_kernels.h"
#include "backend/norm_kernels.h"
#include "backend/random_kernels.h"
#include "backend/transfer_kernels.h"
#include "cuda/blas.h"
#include "cuda/elementwise.h"
#include "cuda/lstm.h"
#include "cuda/norm_pool.h"
#include "cuda/random.h"
#include "cuda/transfer.h"
#include "dp/core/pooled.h"

namespace dp::backend {
namespace {

Tensor raw_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}

// ---- matrix products: cuBLAS / cuBLASLt (cuda/blas.h) ----

void matmul_cuda(const Tensor& C, const Tensor& A, const Tensor& B, const Scalar& alpha, const Scalar& beta, const char* op, bool tf32_ok) {
  cuda::matmul_kernel(C, A, B, alpha.to_double(), beta.to_double(), op, tf32_ok);
}

// [1, n] @ [n, 1] through the GEMM (16-bit floats accumulate in fp32); never TF32, as PyTorch's
// CUDA dot (cublasSdot) is exact fp32.
void dot_cuda(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0);
  const Tensor A = raw_view(a, {1, n}, {n * a.stride(0), a.stride(0)}, a.storage_offset());
  const Tensor B = raw_view(b, {n, 1}, {b.stride(0), 1}, b.storage_offset());
  cuda::matmul_kernel(raw_view(out, {1, 1}, {1, 1}, 0), A, B, 1.0, 0.0, "dot", /*tf32_ok=*/false);
}

// One broadcast multiply on the device: a as a column [n, 1] times b as a row [1, m], both in
// out's dtype.
void outer_cuda(const Tensor& out, const Tensor& a, const Tensor& b) {
  const DType rt = out.dtype();
  const int64_t n = a.size(0), m = b.size(0);
  auto in_rt = [rt](const Tensor& t) {
    if (t.dtype() == rt) return t;
    Tensor c = make_empty(t.sizes(), rt, t.device());
    cuda::copy_kernel(c, t);
    return c;
  };
  const Tensor ac = in_rt(a), bc = in_rt(b);
  cuda::mul_kernel(out, raw_view(ac, {n, 1}, {ac.stride(0), 1}, ac.storage_offset()),
                   raw_view(bc, {1, m}, {m * bc.stride(0), bc.stride(0)}, bc.storage_offset()));
}

// ---- random fills: the Philox kernel, with the CPU's stream layout (cuda/random.h) ----

void random_fill_cuda(RandomKind kind, const Tensor& t, uint64_t seed, uint64_t first, double a, double b) {
  cuda::RandomKind k = cuda::RandomKind::Uniform;
  switch (kind) {
    case RandomKind::Uniform: k = cuda::RandomKind::Uniform; break;
    case RandomKind::Normal: k = cuda::RandomKind::Normal; break;
    case RandomKind::Bernoulli: k = cuda::RandomKind::Bernoulli; break;
  }
  cuda::random_fill(k, t, seed, first, a, b);
}

}  // namespace

void register_cuda_ops_kernels() {
  // The nn kernels (norm_pool.cu, cuDNN convolutions, loss.cu) compute float16 / bfloat16 in float32.
  set_capabilities(DeviceType::CUDA, Capabilities{.kernels = true, .half_nn = true});

  matmul_kernel.set(DeviceType::CUDA, &matmul_cuda);
  matmul_bias_kernel.set(DeviceType::CUDA, &cuda::matmul_bias_kernel);
  dot_kernel.set(DeviceType::CUDA, &dot_cuda);
  outer_kernel.set(DeviceType::CUDA, &outer_cuda);

  lstm_layer_forward.set(DeviceType::CUDA, &cuda::lstm_layer_forward);
  lstm_layer_backward.set(DeviceType::CUDA, &cuda::lstm_layer_backward);

  batch_norm_update_running.set(DeviceType::CUDA, &cuda::batch_norm_update_running);
  batch_norm_invstd.set(DeviceType::CUDA, &cuda::batch_norm_invstd);

  random_fill.set(DeviceType::CUDA, &random_fill_cuda);

  copy_across.set(DeviceType::CUDA, &cuda::copy_across);
}

}  // namespace dp::backend
