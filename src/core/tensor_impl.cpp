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
    if (strides[i] != expected) {
      is_contiguous = false;
      break;
    }
    expected *= sizes[i];
  }
  if (numel == 0) is_contiguous = true;
}

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

Tensor make_empty(IntArrayRef sizes, DType dtype, Device device) {
  // The one checked size computation of every new tensor (sizes_fit): a size whose element count,
  // strides or byte count overflows int64 is a ShapeError, never a wrapped allocation size.
  int64_t n = 0, nbytes = 0;
  if (!sizes_fit(sizes, element_size(dtype), &n, &nbytes)) [[unlikely]] {
    for (int64_t s : sizes)
      if (s < 0) throw ShapeError(detail::str("empty: negative dimension in size ", shape_str(sizes)));
    throw ShapeError(detail::str("empty: size ", shape_str(sizes), " of dtype ", dtype_name(dtype),
                                 " is too large: its element count or byte size overflows int64"));
  }
  // Row-major strides (a size-1 or empty dim gets the stride of the dims after it, as
  // contiguous_strides gives); they can't overflow once sizes_fit said yes.
  const size_t nd = sizes.size();
  Shape strides(nd);
  int64_t stride = 1;
  for (size_t i = nd; i-- > 0;) {
    strides[i] = stride;
    stride *= sizes[i] > 1 ? sizes[i] : 1;
  }
  auto storage = ::dp::detail::make_pooled<StorageImpl>(static_cast<size_t>(nbytes), device);
  return Tensor(::dp::detail::make_pooled<TensorImpl>(TensorImpl::Contiguous{}, std::move(storage), sizes.vec(), std::move(strides), n, dtype));
}

}  // namespace dp
