// Tensors made without autograd (tensor_nograd.h).
#include "backend/tensor_nograd.h"
#include "dp/core/pooled.h"
#include "backend/copy_kernels.h"

namespace dp::backend {

const char* torch_type_name(DType t) {
  switch (t) {
    case DType::Bool:
      return "Bool";
    case DType::UInt8:
      return "Byte";
    case DType::Int32:
      return "Int";
    case DType::Int64:
      return "Long";
    case DType::Float16:
      return "Half";
    case DType::BFloat16:
      return "BFloat16";
    case DType::Float32:
      return "Float";
    case DType::Float64:
      return "Double";
  }
  return "Unknown";
}

Tensor contiguous_nograd(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = make_empty(t.sizes(), t.dtype(), t.device());
  backend::copy_kernel(backend::copy_device_type(out, t), out, t);
  return out;
}

Tensor convert_nograd(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = make_empty(t.sizes(), dtype, t.device());
  backend::copy_kernel(backend::copy_device_type(out, t), out, t);
  return out;
}

Tensor restride_nograd(const Tensor& t, IntArrayRef sizes, IntArrayRef strides) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), sizes.vec(), strides.vec(), t.storage_offset(), t.dtype()));
}

}  // namespace dp::backend
