// PyTorch's type promotion (c10/core/ScalarType.h, ATen/native/TypeProperties.cpp): operands are
// sorted into dimensioned tensors, 0-dim tensors and Scalars; each group is promoted on its own,
// then a lower-priority group only counts when it is of a higher category (bool < integral <
// floating), in which case it lifts the result to that category.
#include "ops/elementwise_common.h"

namespace dp {
namespace ops {
namespace {

int promote_skip_undefined(int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return static_cast<int>(promote_types(static_cast<DType>(a), static_cast<DType>(b)));
}

bool is_float(int t) { return t >= 0 && is_floating_point(static_cast<DType>(t)); }

// combine_categories(higher, lower) of TypeProperties.cpp (no complex types here).
int combine_categories(int higher, int lower) {
  if (is_float(higher)) return higher;
  if (higher == static_cast<int>(DType::Bool) || is_float(lower)) return promote_skip_undefined(higher, lower);
  if (higher >= 0) return higher;
  return lower;
}

}  // namespace

void TypeState::add(const Tensor& t) {
  const int d = static_cast<int>(t.dtype());
  if (t.dim() > 0)
    dim_ = promote_skip_undefined(dim_, d);
  else
    zero_ = promote_skip_undefined(zero_, d);
}

void TypeState::add(const Scalar& s) {
  // A wrapped number: bool, int64, or the default floating dtype.
  const DType d = s.is_bool() ? kBool : s.is_integral() ? kInt64 : default_float_dtype();
  wrapped_ = promote_skip_undefined(wrapped_, static_cast<int>(d));
}

DType TypeState::result() const {
  int r = combine_categories(dim_, combine_categories(zero_, wrapped_));
  return r < 0 ? default_float_dtype() : static_cast<DType>(r);
}

bool can_cast(DType from, DType to) {
  if (is_floating_point(from) && is_integral(to, /*include_bool=*/false)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

void check_can_cast(const char* op, DType result, DType out) {
  DP_CHECK(can_cast(result, out), DTypeError, op, ": result type ", torch_type_name(result), " can't be cast to the desired output type ",
           torch_type_name(out));
}

void check_alpha(const char* op, DType t, const Scalar& alpha) {
  DP_CHECK(!alpha.is_bool() || t == kBool, DTypeError, op, ": Boolean alpha only supported for Boolean results.");
  DP_CHECK(is_floating_point(t) || !alpha.is_floating_point(), DTypeError, op,
           ": For integral input tensors, argument alpha must not be a floating point number.");
}

void check_sub(const char* op, DType a, DType b) {
  DP_CHECK(!(a == kBool && b == kBool), DTypeError, op,
           ": Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.");
  DP_CHECK(a != kBool && b != kBool, DTypeError, op,
           ": Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask, use the `~` or "
           "`logical_not()` operator instead.");
}

Scalar negate(const Scalar& s) {
  if (s.is_floating_point()) return Scalar(-s.to_double());
  return Scalar(-s.to_int());
}

}  // namespace ops

DType result_type(const Tensor& a, const Tensor& b) {
  ops::check_defined("result_type", a);
  ops::check_defined("result_type", b);
  // Fast path: two dimensioned tensors (or two 0-dim ones) of one dtype.
  if (a.dtype() == b.dtype()) return a.dtype();
  ops::TypeState s;
  s.add(a);
  s.add(b);
  return s.result();
}

DType result_type(const Tensor& a, const Scalar& b) {
  ops::check_defined("result_type", a);
  ops::TypeState s;
  s.add(a);
  s.add(b);
  return s.result();
}

}  // namespace dp
