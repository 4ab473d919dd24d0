#include "dp/core/pooled.h"
#include "dp/core/tensor_impl.h"
#include "dp/core/tensor.h"

namespace dp {

TensorImpl::TensorImpl(Storage s, Shape sz, Shape st, int64_t off, DType dt)
    : storage(std::move(s)), sizes(std::move(sz)), strides(std::move(st)), offset(off), dtype(dt) {
  refresh_metadata();
}

void TensorImpl::refresh_metadata() {
  numel = numel_of(sizes);
  // Contiguous = row-major dense; size-1 dims may have any stride (as in PyTorch).
  is_contiguous = true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) { is_contiguous = false; break; }
    expected *= sizes[i];
  }
  if (numel == 0) is_contiguous = true;
}

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

Tensor make_empty(IntArrayRef sizes, DType dtype, Device device) {
  // One pass from the last dim: the check, the element count and the row-major strides (a size-1
  // dim gets the stride of the dims after it, as contiguous_strides gives).
  const size_t nd = sizes.size();
  Shape strides(nd);
  int64_t n = 1, stride = 1;
  for (size_t i = nd; i-- > 0;) {
    const int64_t s = sizes[i];
    if (s < 0) [[unlikely]]
      throw ShapeError(detail::str("empty: negative dimension in size ", shape_str(sizes)));
    strides[i] = stride;
    stride *= s > 1 ? s : 1;  // as contiguous_strides: an empty dim does not zero the strides before it
    n *= s;
  }
  auto storage = ::dp::detail::make_pooled<StorageImpl>(static_cast<size_t>(n) * element_size(dtype), device);
  return Tensor(::dp::detail::make_pooled<TensorImpl>(TensorImpl::Contiguous{}, std::move(storage), sizes.vec(), std::move(strides), n, dtype));
}

}  // namespace dp
