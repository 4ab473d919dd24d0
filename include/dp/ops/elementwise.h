#pragma once
// Element-wise math with NumPy broadcasting and PyTorch type promotion.
#include <optional>
#include <string>
#include "dp/core/tensor.h"

namespace dp {

// The dtype PyTorch's result_type gives: dimensioned tensors outrank 0-dim tensors, which outrank
// Scalars; a higher category (bool < integral < floating) always wins.
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor div(const Tensor& a, const Scalar& b);
Tensor div(const Scalar& a, const Tensor& b);
Tensor neg(const Tensor& a);
Tensor pow(const Tensor& a, const Tensor& e);
Tensor pow(const Tensor& a, const Scalar& e);
Tensor pow(const Scalar& a, const Tensor& e);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor log1p(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor sign(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
Tensor square(const Tensor& a);
Tensor reciprocal(const Tensor& a);
Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor clamp_min(const Tensor& a, const Scalar& min);
Tensor clamp_max(const Tensor& a, const Scalar& max);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor lerp(const Tensor& a, const Tensor& end, const Scalar& weight);

// Comparisons give bool tensors (not differentiable).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor logical_not(const Tensor& a);
// Truth of each element (non-zero, NaN included) combined: Bool results for any input dtypes.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
// Bit-wise ops (the operators ~ & | ^), here for Bool tensors only: other dtypes are a DTypeError
// naming the op and dtypes (use logical_* for a truth test of numbers).
Tensor bitwise_not(const Tensor& a);
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
bool equal(const Tensor& a, const Tensor& b);  // same shape and every element equal
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// Activations.
Tensor relu(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor gelu(const Tensor& a, const std::string& approximate = "none");  // "none" (erf) or "tanh"
Tensor silu(const Tensor& a);
Tensor softplus(const Tensor& a);

// In place: the result dtype must fit `self` (PyTorch's rule: no float result into an int tensor).
// In-place ops bump the version counter; on a leaf that requires grad (with grad mode on) they throw.
Tensor& add_(Tensor& self, const Tensor& b, const Scalar& alpha = 1);
Tensor& add_(Tensor& self, const Scalar& b, const Scalar& alpha = 1);
Tensor& sub_(Tensor& self, const Tensor& b, const Scalar& alpha = 1);
Tensor& sub_(Tensor& self, const Scalar& b, const Scalar& alpha = 1);
Tensor& mul_(Tensor& self, const Tensor& b);
Tensor& mul_(Tensor& self, const Scalar& b);
Tensor& div_(Tensor& self, const Tensor& b);
Tensor& div_(Tensor& self, const Scalar& b);
Tensor& neg_(Tensor& self);
Tensor& sqrt_(Tensor& self);
Tensor& relu_(Tensor& self);
Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor& addcmul_(Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value = 1);  // self += value*a*b
Tensor& addcdiv_(Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value = 1);  // self += value*a/b
Tensor& lerp_(Tensor& self, const Tensor& end, const Scalar& weight);
Tensor& fill_(Tensor& self, const Scalar& value);
Tensor& zero_(Tensor& self);
// Copies src into self, broadcasting src and converting dtype (and device); differentiable.
Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking = false);

}  // namespace dp
