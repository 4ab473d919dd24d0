#pragma once
// Matrix products: on the CPU through OpenBLAS (float32/float64; other dtypes a reference loop), on
// CUDA through cuBLAS/cuBLASLt (float32/float64, float16/bfloat16 accumulating in float32; TF32 only
// after dp::cuda::set_allow_tf32(true), dp/cuda/matmul.h).
#include <optional>
#include "dp/core/tensor.h"

namespace dp {

Tensor mm(const Tensor& a, const Tensor& b);      // [n,k] @ [k,m]
Tensor bmm(const Tensor& a, const Tensor& b);     // [B,n,k] @ [B,k,m]
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul rules (1-D, batched, broadcast)
// beta*self + alpha*(a @ b); self broadcasts to [n, m] (a bias row, as Linear uses it).
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta = 1, const Scalar& alpha = 1);
// x @ w^T + b, as torch.nn.functional.linear (b may be undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
Tensor dot(const Tensor& a, const Tensor& b);
Tensor outer(const Tensor& a, const Tensor& b);

}  // namespace dp
