// Tensor's methods and operators: each forwards to the free function of the same name. Declared in
// core (dp/core/tensor.h), defined here in ops, the layer of the functions they call (as ATen's
// TensorBody methods are defined beside the operators, not in c10).
#include "dp/ops/elementwise.h"
#include "dp/ops/index.h"
#include "dp/ops/linalg.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"

namespace dp {

Tensor Tensor::to(Device d, bool nb, bool copy) const { return dp::to(*this, d, dtype(), nb, copy); }
Tensor Tensor::to(DType t, bool nb, bool copy) const { return dp::to(*this, device(), t, nb, copy); }
Tensor Tensor::to(Device d, DType t, bool nb, bool copy) const { return dp::to(*this, d, t, nb, copy); }
Tensor Tensor::contiguous() const { return is_contiguous() ? *this : dp::contiguous(*this); }
Tensor Tensor::clone() const { return dp::clone(*this); }
Tensor& Tensor::copy_(const Tensor& src, bool nb) { return dp::copy_(*this, src, nb); }

Tensor Tensor::view(IntArrayRef s) const { return dp::view(*this, s); }
Tensor Tensor::reshape(IntArrayRef s) const { return dp::reshape(*this, s); }
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t len) const { return dp::narrow(*this, d, start, len); }
Tensor Tensor::slice(int64_t d, std::optional<int64_t> s, std::optional<int64_t> e, int64_t step) const { return dp::slice(*this, d, s, e, step); }
Tensor Tensor::select(int64_t d, int64_t i) const { return dp::select(*this, d, i); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return dp::transpose(*this, a, b); }
Tensor Tensor::t() const {
  DP_CHECK(dim() <= 2, ShapeError, "t() expects a tensor with <= 2 dimensions, but self is ", dim(), "D (", size_str(), ")");
  return dim() < 2 ? *this : dp::transpose(*this, 0, 1);
}
Tensor Tensor::permute(IntArrayRef dims) const { return dp::permute(*this, dims); }
Tensor Tensor::expand(IntArrayRef s) const { return dp::expand(*this, s); }
Tensor Tensor::squeeze() const { return dp::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return dp::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return dp::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return dp::flatten(*this, s, e); }
Tensor Tensor::unflatten(int64_t d, IntArrayRef s) const { return dp::unflatten(*this, d, s); }
Tensor Tensor::as_strided(IntArrayRef s, IntArrayRef st, std::optional<int64_t> off) const { return dp::as_strided(*this, s, st, off); }
std::vector<Tensor> Tensor::chunk(int64_t n, int64_t d) const { return dp::chunk(*this, n, d); }
std::vector<Tensor> Tensor::split(int64_t s, int64_t d) const { return dp::split(*this, s, d); }
std::vector<Tensor> Tensor::split_with_sizes(IntArrayRef s, int64_t d) const { return dp::split_with_sizes(*this, s, d); }

Tensor Tensor::add(const Tensor& o, const Scalar& a) const { return dp::add(*this, o, a); }
Tensor Tensor::add(const Scalar& o) const { return dp::add(*this, o); }
Tensor Tensor::sub(const Tensor& o, const Scalar& a) const { return dp::sub(*this, o, a); }
Tensor Tensor::sub(const Scalar& o) const { return dp::sub(*this, o); }
Tensor Tensor::mul(const Tensor& o) const { return dp::mul(*this, o); }
Tensor Tensor::mul(const Scalar& o) const { return dp::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return dp::div(*this, o); }
Tensor Tensor::div(const Scalar& o) const { return dp::div(*this, o); }
Tensor Tensor::neg() const { return dp::neg(*this); }
Tensor Tensor::pow(const Tensor& e) const { return dp::pow(*this, e); }
Tensor Tensor::pow(const Scalar& e) const { return dp::pow(*this, e); }
Tensor Tensor::exp() const { return dp::exp(*this); }
Tensor Tensor::log() const { return dp::log(*this); }
Tensor Tensor::sqrt() const { return dp::sqrt(*this); }
Tensor Tensor::abs() const { return dp::abs(*this); }
Tensor Tensor::sin() const { return dp::sin(*this); }
Tensor Tensor::cos() const { return dp::cos(*this); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const { return dp::clamp(*this, lo, hi); }
Tensor Tensor::relu() const { return dp::relu(*this); }
Tensor Tensor::sigmoid() const { return dp::sigmoid(*this); }
Tensor Tensor::tanh() const { return dp::tanh(*this); }
Tensor Tensor::maximum(const Tensor& o) const { return dp::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return dp::minimum(*this, o); }
Tensor Tensor::eq(const Tensor& o) const { return dp::eq(*this, o); }
Tensor Tensor::eq(const Scalar& o) const { return dp::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return dp::ne(*this, o); }
Tensor Tensor::ne(const Scalar& o) const { return dp::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return dp::lt(*this, o); }
Tensor Tensor::lt(const Scalar& o) const { return dp::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return dp::le(*this, o); }
Tensor Tensor::le(const Scalar& o) const { return dp::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return dp::gt(*this, o); }
Tensor Tensor::gt(const Scalar& o) const { return dp::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return dp::ge(*this, o); }
Tensor Tensor::ge(const Scalar& o) const { return dp::ge(*this, o); }
Tensor Tensor::logical_not() const { return dp::logical_not(*this); }
Tensor Tensor::logical_and(const Tensor& o) const { return dp::logical_and(*this, o); }
Tensor Tensor::logical_or(const Tensor& o) const { return dp::logical_or(*this, o); }
Tensor Tensor::logical_xor(const Tensor& o) const { return dp::logical_xor(*this, o); }
Tensor Tensor::sum() const { return dp::sum(*this); }
Tensor Tensor::sum(IntArrayRef d, bool k) const { return dp::sum(*this, d, k); }
Tensor Tensor::mean() const { return dp::mean(*this); }
Tensor Tensor::mean(IntArrayRef d, bool k) const { return dp::mean(*this, d, k); }
Tensor Tensor::max() const { return dp::max(*this); }
std::pair<Tensor, Tensor> Tensor::max(int64_t d, bool k) const { return dp::max(*this, d, k); }
Tensor Tensor::min() const { return dp::min(*this); }
std::pair<Tensor, Tensor> Tensor::min(int64_t d, bool k) const { return dp::min(*this, d, k); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool k) const { return dp::argmax(*this, d, k); }
Tensor Tensor::var(IntArrayRef d, int64_t c, bool k) const { return dp::var(*this, d, c, k); }
Tensor Tensor::softmax(int64_t d) const { return dp::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return dp::log_softmax(*this, d); }
Tensor Tensor::matmul(const Tensor& o) const { return dp::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return dp::mm(*this, o); }
Tensor Tensor::bmm(const Tensor& o) const { return dp::bmm(*this, o); }
Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return dp::index_select(*this, d, i); }
Tensor Tensor::gather(int64_t d, const Tensor& i) const { return dp::gather(*this, d, i); }
Tensor Tensor::scatter_add(int64_t d, const Tensor& i, const Tensor& s) const { return dp::scatter_add(*this, d, i, s); }
Tensor Tensor::masked_fill(const Tensor& m, const Scalar& v) const { return dp::masked_fill(*this, m, v); }
// The sequence ops' methods (tril, triu, topk, sort, argsort, cumsum, repeat_interleave, baddbmm,
// multinomial, masked_fill_) are defined in src/ops/sequence.cpp: here they would need an include
// of dp/ops/sequence.h, a new edge from core up to ops.

Tensor& Tensor::add_(const Tensor& o, const Scalar& a) { return dp::add_(*this, o, a); }
Tensor& Tensor::add_(const Scalar& o) { return dp::add_(*this, o); }
Tensor& Tensor::sub_(const Tensor& o, const Scalar& a) { return dp::sub_(*this, o, a); }
Tensor& Tensor::sub_(const Scalar& o) { return dp::sub_(*this, o); }
Tensor& Tensor::mul_(const Tensor& o) { return dp::mul_(*this, o); }
Tensor& Tensor::mul_(const Scalar& o) { return dp::mul_(*this, o); }
Tensor& Tensor::div_(const Tensor& o) { return dp::div_(*this, o); }
Tensor& Tensor::div_(const Scalar& o) { return dp::div_(*this, o); }
Tensor& Tensor::addcmul_(const Tensor& a, const Tensor& b, const Scalar& v) { return dp::addcmul_(*this, a, b, v); }
Tensor& Tensor::addcdiv_(const Tensor& a, const Tensor& b, const Scalar& v) { return dp::addcdiv_(*this, a, b, v); }
Tensor& Tensor::lerp_(const Tensor& e, const Scalar& w) { return dp::lerp_(*this, e, w); }
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) { return dp::clamp_(*this, lo, hi); }
Tensor& Tensor::sqrt_() { return dp::sqrt_(*this); }
Tensor& Tensor::relu_() { return dp::relu_(*this); }
Tensor& Tensor::neg_() { return dp::neg_(*this); }
Tensor& Tensor::fill_(const Scalar& v) { return dp::fill_(*this, v); }
Tensor& Tensor::zero_() { return dp::zero_(*this); }
Tensor& Tensor::scatter_add_(int64_t d, const Tensor& i, const Tensor& s) { return dp::scatter_add_(*this, d, i, s); }
Tensor& Tensor::index_add_(int64_t d, const Tensor& i, const Tensor& s) { return dp::index_add_(*this, d, i, s); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return div_(a, b); }
Tensor& operator+=(Tensor& a, const Scalar& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Scalar& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Scalar& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Scalar& b) { return div_(a, b); }

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }
// s OP t is t's mirrored comparison with s (PyTorch's reflected operators: 0 < t is t > 0).
Tensor operator==(const Scalar& a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(const Scalar& a, const Tensor& b) { return ne(b, a); }
Tensor operator<(const Scalar& a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(const Scalar& a, const Tensor& b) { return ge(b, a); }
Tensor operator>(const Scalar& a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(const Scalar& a, const Tensor& b) { return le(b, a); }
Tensor operator~(const Tensor& a) { return bitwise_not(a); }
Tensor operator&(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }

}  // namespace dp
