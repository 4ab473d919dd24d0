// The CUDA backend's kernels of the index, matrix product, LSTM, normalization, random and
// transfer kernel interfaces (src/backend/*_kernels.h), and its capabilities; registered from
// register_cuda_kernels() (register_kernels.cpp). The device work is in the .cu files and
// blas.cpp / lstm.cpp / transfer.cpp; what is here adapts it to the interfaces' signatures.
#include "backend/capabilities.h"
#include "backend/index_kernels.h"
#include "backend/linalg_kernels.h"
#include "backend/lstm_kernels.h"
#include "backend/norm_kernels.h"
#include "backend/random_kernels.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/index.h"
#include "backend/cuda/lstm.h"
#include "backend/cuda/norm_pool.h"
#include "backend/cuda/random.h"
#include "backend/cuda/transfer.h"
#include "dp/core/errors.h"
#include "dp/core/pooled.h"

namespace dp::backend {
namespace {

Tensor raw_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}

// t, or a contiguous copy of it on its device.
Tensor contiguous_on_device(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = make_empty(t.sizes(), t.dtype(), t.device());
  cuda::copy_kernel(out, t);
  return out;
}

// ---- index: cuda/index.h's two kernels run on the views of the index plans ----

// A kernel met an index outside [0, size): the CPU's message, from the indices read on the host.
[[noreturn]] void throw_bad_index(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  read_indices(op, index.cpu(), dim, size);
  throw IndexError(detail::str(op, ": an index is out of bounds for dimension ", dim, " with size ", size));
}

// Checks every index of `index` before an in-place op writes anything (as on the CPU, a bad index
// must leave self untouched).
void check_indices_cuda(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  if (cuda::index_out_of_range(contiguous_on_device(index), size)) throw_bad_index(op, index, dim, size);
}

// cuda::index_gather / index_scatter_add on a plan; with check, a bad value of `index` (the op's
// index tensor, dim `dim`) is the CPU's IndexError, also when the plan is empty but `index` is not
// (the CPU checks every index).
void run_gather(const char* op, const index_plan::IndexKernelPlan& p, const Tensor& index, int64_t dim, bool check) {
  if (p.it.numel() == 0) {
    if (check) check_indices_cuda(op, index, dim, p.bound);
    return;
  }
  if (cuda::index_gather(p.it, p.src, p.index, p.step, p.bound, check)) throw_bad_index(op, index, dim, p.bound);
}

void run_scatter_add(const char* op, const index_plan::IndexKernelPlan& p, const Tensor& index, int64_t dim, bool check) {
  if (p.it.numel() == 0) {
    if (check) check_indices_cuda(op, index, dim, p.bound);
    return;
  }
  if (cuda::index_scatter_add(p.it, p.src, p.index, p.step, p.bound, p.skip, check)) throw_bad_index(op, index, dim, p.bound);
}

void index_select_cuda(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool check) {
  run_gather(op, index_plan::index_select(out, a, dim, index), index, dim, check);
}

void index_add_cuda(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool check) {
  run_scatter_add(op, index_plan::index_add(self, dim, index, src), index, dim, check);
}

void gather_cuda(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool check) {
  run_gather(op, index_plan::gather(out, a, dim, index), index, dim, check);
}

void scatter_add_cuda(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool check) {
  run_scatter_add(op, index_plan::scatter_add(self, dim, index, src), index, dim, check);
}

void embedding_forward_cuda(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  run_gather("embedding", index_plan::embedding(out, weight, indices), indices, 0, true);
}

void embedding_backward_cuda(const Tensor& grad_weight, const Tensor& g, const Tensor& indices, int64_t padding_idx) {
  run_scatter_add("embedding backward", index_plan::embedding_backward(grad_weight, g, indices, padding_idx), indices, 0, false);
}

// A one scattered at each class position (the values were checked by the op).
void one_hot_cuda(const Tensor& out, const Tensor& indices, const std::vector<int64_t>& /*values*/) {
  Tensor one = make_empty({}, kInt64, indices.device());
  cuda::fill_kernel(one, 1);
  run_scatter_add("one_hot", index_plan::one_hot(out, one, indices), indices, indices.dim(), false);
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
    case RandomKind::Uniform:
      k = cuda::RandomKind::Uniform;
      break;
    case RandomKind::Normal:
      k = cuda::RandomKind::Normal;
      break;
    case RandomKind::Bernoulli:
      k = cuda::RandomKind::Bernoulli;
      break;
  }
  cuda::random_fill(k, t, seed, first, a, b);
}

}  // namespace

void register_cuda_ops_kernels() {
  // The nn kernels (norm_pool.cu, cuDNN convolutions, loss.cu) compute float16 / bfloat16 in float32.
  set_capabilities(DeviceType::CUDA, Capabilities{.kernels = true, .half_nn = true});

  index_select_kernel.set(DeviceType::CUDA, &index_select_cuda);
  index_add_kernel.set(DeviceType::CUDA, &index_add_cuda);
  gather_kernel.set(DeviceType::CUDA, &gather_cuda);
  scatter_add_kernel.set(DeviceType::CUDA, &scatter_add_cuda);
  check_indices.set(DeviceType::CUDA, &check_indices_cuda);
  embedding_forward.set(DeviceType::CUDA, &embedding_forward_cuda);
  embedding_backward.set(DeviceType::CUDA, &embedding_backward_cuda);
  one_hot_kernel.set(DeviceType::CUDA, &one_hot_cuda);
  masked_fill_kernel.set(DeviceType::CUDA, &cuda::masked_fill);

  matmul_kernel.set(DeviceType::CUDA, &matmul_cuda);
  matmul_bias_kernel.set(DeviceType::CUDA, &cuda::matmul_bias_kernel);
  dot_kernel.set(DeviceType::CUDA, &dot_cuda);
  outer_kernel.set(DeviceType::CUDA, &outer_cuda);

  lstm_layer_forward.set(DeviceType::CUDA, &cuda::lstm_layer_forward);
  lstm_layer_backward.set(DeviceType::CUDA, &cuda::lstm_layer_backward);

  batch_norm_update_running.set(DeviceType::CUDA, &cuda::batch_norm_update_running);
  batch_norm_invstd.set(DeviceType::CUDA, &cuda::batch_norm_invstd);

  random_fill.set(DeviceType::CUDA, &random_fill_cuda);
  randint_fill.set(DeviceType::CUDA, &cuda::randint_fill);
  randperm_fill.set(DeviceType::CUDA, &cuda::randperm_fill);
}

}  // namespace dp::backend
