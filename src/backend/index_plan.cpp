// The operand views of the CUDA index kernels for each index op (see index_kernels.h).
#include "backend/index_kernels.h"
#include "dp/core/pooled.h"

namespace dp::backend::index_plan {
namespace {

// A view of t's storage (no autograd: the kernels' operands).
Tensor view(const Tensor& t, IntArrayRef sizes, IntArrayRef strides) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), sizes.vec(), strides.vec(), t.storage_offset(), t.dtype()));
}

// st with the indexed dim's entry 0 (the kernel adds index * step itself).
Shape zero_at(Shape st, int64_t dim) {
  st[dim] = 0;
  return st;
}

// A 0-/1-D index seen with an nd-dim iteration shape: it runs along dim only.
Shape along(const Tensor& index, int64_t nd, int64_t dim) {
  Shape st(static_cast<size_t>(nd), 0);
  st[dim] = index.dim() == 0 ? 0 : index.stride(0);
  return st;
}

// indices' strides with a trailing 0 (embedding's row dim).
Shape with_row(const Tensor& indices) {
  Shape st = indices.strides();
  st.push_back(0);
  return st;
}

}  // namespace

IndexKernelPlan index_select(const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index) {
  return {out, view(a, out.sizes(), zero_at(a.strides(), dim)), view(index, out.sizes(), along(index, out.dim(), dim)), a.stride(dim), a.size(dim)};
}

IndexKernelPlan gather(const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index) {
  return {view(out, index.sizes(), out.strides()), view(a, index.sizes(), zero_at(a.strides(), dim)), index, a.stride(dim), a.size(dim)};
}

IndexKernelPlan embedding(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  Shape ws(static_cast<size_t>(out.dim()), 0);
  ws.back() = weight.stride(1);
  return {out, view(weight, out.sizes(), ws), view(indices, out.sizes(), with_row(indices)), weight.stride(0), weight.size(0)};
}

IndexKernelPlan scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return {view(self, index.sizes(), zero_at(self.strides(), dim)), view(src, index.sizes(), src.strides()), index, self.stride(dim), self.size(dim)};
}

IndexKernelPlan index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return {view(self, src.sizes(), zero_at(self.strides(), dim)), src, view(index, src.sizes(), along(index, src.dim(), dim)), self.stride(dim),
          self.size(dim)};
}

IndexKernelPlan embedding_backward(const Tensor& grad_weight, const Tensor& g, const Tensor& indices, int64_t padding_idx) {
  Shape ws(static_cast<size_t>(g.dim()), 0);
  ws.back() = grad_weight.stride(1);
  return {view(grad_weight, g.sizes(), ws), g, view(indices, g.sizes(), with_row(indices)), grad_weight.stride(0), grad_weight.size(0), padding_idx};
}

IndexKernelPlan one_hot(const Tensor& out, const Tensor& one, const Tensor& indices) {
  Shape it_shape = indices.sizes();
  it_shape.push_back(1);
  const int64_t nd = static_cast<int64_t>(it_shape.size());
  return {view(out, it_shape, zero_at(out.strides(), nd - 1)), view(one, it_shape, Shape(static_cast<size_t>(nd), 0)),
          view(indices, it_shape, with_row(indices)), out.stride(nd - 1), out.size(nd - 1)};
}

}  // namespace dp::backend::index_plan
