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
#include "dp/core/errors.h"
#include "dp/core/pooled.h"

namespace dp::backend::cuda {
namespace {

Tensor raw_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}

// t, or a contiguous copy of it on its device.
Tensor contiguous_on_device(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = make_empty(t.sizes(), t.dtype(), t.device());
  cuda::copy_on_device(out, t);
  return out;
}

// ---- index: cuda/index.h's two kernels run on the views of the index plans ----

// A kernel met an index outside [0, size): the CPU's message, from the indices read on the host.
[[noreturn]] void throw_bad_index(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  read_indices(op, index.cpu(), dim, size);
  throw IndexError(::dp::detail::str(op, ": an index is out of bounds for dimension ", dim, " with size ", size));
}

// Checks every index of `index` before an in-place op writes anything (as on the CPU, a bad index
// must leave self untouched).
void check_indices_kernel(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  if (cuda::index_out_of_range(contiguous_on_device(index), size)) throw_bad_index(op, index, dim, size);
}

// cuda::index_gather / index_scatter_add on a plan; with check, a bad value of `index` (the op's
// index tensor, dim `dim`) is the CPU's IndexError, also when the plan is empty but `index` is not
// (the CPU checks every index).
void run_gather(const char* op, const index_plan::IndexKernelPlan& p, const Tensor& index, int64_t dim, bool check) {
  if (p.it.numel() == 0) {
    if (check) check_indices_kernel(op, index, dim, p.bound);
    return;
  }
  if (cuda::index_gather(p.it, p.src, p.index, p.step, p.bound, check)) throw_bad_index(op, index, dim, p.bound);
}

void run_scatter_add(const char* op, const index_plan::IndexKernelPlan& p, const Tensor& index, int64_t dim, bool check) {
  if (p.it.numel() == 0) {
    if (check) check_indices_kernel(op, index, dim, p.bound);
    return;
  }
  if (cuda::index_scatter_add(p.it, p.src, p.index, p.step, p.bound, p.skip, check)) throw_bad_index(op, index, dim, p.bound);
}

void index_select_kernel(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool check) {
  run_gather(op, index_plan::index_select(out, a, dim, index), index, dim, check);
}

void index_add_kernel(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool check) {
  run_scatter_add(op, index_plan::index_add(self, dim, index, src), index, dim, check);
}

void gather_kernel(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool check) {
  run_gather(op, index_plan::gather(out, a, dim, index), index, dim, check);
}

void scatter_add_kernel(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool check) {
  run_scatter_add(op, index_plan::scatter_add(self, dim, index, src), index, dim, check);
}

void embedding_forward_kernel(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  run_gather("embedding", index_plan::embedding(out, weight, indices), indices, 0, true);
}

void embedding_backward_kernel(const Tensor& grad_weight, const Tensor& g, const Tensor& indices, int64_t padding_idx) {
  run_scatter_add("embedding backward", index_plan::embedding_backward(grad_weight, g, indices, padding_idx), indices, 0, false);
}

// A one scattered at each class position (the values were checked by the op).
void one_hot_kernel(const Tensor& out, const Tensor& indices, const std::vector<int64_t>& /*values*/) {
  Tensor one = make_empty({}, kInt64, indices.device());
  cuda::fill_kernel(one, 1);
  run_scatter_add("one_hot", index_plan::one_hot(out, one, indices), indices, indices.dim(), false);
}

// ---- matrix products: cuBLAS / cuBLASLt (cuda/blas.h) ----

void matmul_kernel(const Tensor& C, const Tensor& A, const Tensor& B, const Scalar& alpha, const Scalar& beta, const char* op, bool tf32_ok) {
  cuda::matmul_into(C, A, B, alpha.to_double(), beta.to_double(), op, tf32_ok);
}

// [1, n] @ [n, 1] through the GEMM (16-bit floats accumulate in fp32); never TF32, as PyTorch's
// CUDA dot (cublasSdot) is exact fp32.
void dot_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0);
  const Tensor A = raw_view(a, {1, n}, {n * a.stride(0), a.stride(0)}, a.storage_offset());
  const Tensor B = raw_view(b, {n, 1}, {b.stride(0), 1}, b.storage_offset());
  cuda::matmul_into(raw_view(out, {1, 1}, {1, 1}, 0), A, B, 1.0, 0.0, "dot", /*tf32_ok=*/false);
}

// One broadcast multiply on the device: a as a column [n, 1] times b as a row [1, m], both in
// out's dtype.
void outer_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  const DType rt = out.dtype();
  const int64_t n = a.size(0), m = b.size(0);
  auto in_rt = [rt](const Tensor& t) {
    if (t.dtype() == rt) return t;
    Tensor c = make_empty(t.sizes(), rt, t.device());
    cuda::copy_on_device(c, t);
    return c;
  };
  const Tensor ac = in_rt(a), bc = in_rt(b);
  cuda::mul_kernel(out, raw_view(ac, {n, 1}, {ac.stride(0), 1}, ac.storage_offset()),
                   raw_view(bc, {1, m}, {m * bc.stride(0), bc.stride(0)}, bc.storage_offset()));
}

}  // namespace

void register_cuda_ops_kernels() {
  // The nn kernels (norm_pool.cu, cuDNN convolutions, loss.cu) compute float16 / bfloat16 in float32.
  set_capabilities(DeviceType::CUDA, Capabilities{.kernels = true, .half_nn = true});

  DP_REGISTER_KERNEL(CUDA, index_select_kernel);
  DP_REGISTER_KERNEL(CUDA, index_add_kernel);
  DP_REGISTER_KERNEL(CUDA, gather_kernel);
  DP_REGISTER_KERNEL(CUDA, scatter_add_kernel);
  DP_REGISTER_KERNEL(CUDA, check_indices_kernel);
  DP_REGISTER_KERNEL(CUDA, embedding_forward_kernel);
  DP_REGISTER_KERNEL(CUDA, embedding_backward_kernel);
  DP_REGISTER_KERNEL(CUDA, one_hot_kernel);
  DP_REGISTER_KERNEL(CUDA, masked_fill_kernel);

  DP_REGISTER_KERNEL(CUDA, matmul_kernel);
  DP_REGISTER_KERNEL(CUDA, matmul_bias_kernel);
  DP_REGISTER_KERNEL(CUDA, dot_kernel);
  DP_REGISTER_KERNEL(CUDA, outer_kernel);

  DP_REGISTER_KERNEL(CUDA, lstm_layer_forward_kernel);
  DP_REGISTER_KERNEL(CUDA, lstm_layer_backward_kernel);

  DP_REGISTER_KERNEL(CUDA, batch_norm_update_running_kernel);
  DP_REGISTER_KERNEL(CUDA, batch_norm_invstd_kernel);

  DP_REGISTER_KERNEL(CUDA, random_fill_kernel);
  DP_REGISTER_KERNEL(CUDA, randint_fill_kernel);
  DP_REGISTER_KERNEL(CUDA, randperm_fill_kernel);
}

}  // namespace dp::backend::cuda
