#pragma once
// Tensors made without autograd for the ops' and the backends' internal use (the operands a
// kernel reads), and the dtype names PyTorch's messages use.
#include "dp/core/tensor.h"

namespace dp::backend {

// PyTorch's short scalar type names used in messages: Float, Double, Long, Int, Byte, Bool, Half, BFloat16.
const char* torch_type_name(DType t);

// A contiguous tensor with t's values (t itself when already contiguous); no autograd.
Tensor contiguous_nograd(const Tensor& t);
// t converted to dtype (t itself when it already has it); no autograd.
Tensor convert_nograd(const Tensor& t, DType dtype);
// A tensor viewing t's storage with the given sizes and strides; no autograd.
Tensor restride_nograd(const Tensor& t, IntArrayRef sizes, IntArrayRef strides);

}  // namespace dp::backend
