// Logical (logical_and/or/xor: truth of any dtype) and bit-wise ops on Bool tensors (bitwise_*, the
// operators ~ & | ^). No new kernels: on bool operands and a bool output, the existing kernels
// already are these ops (mul is `and`, add with alpha 1 is `or`, ne is `xor`), with broadcasting and
// their CUDA instantiations. Results are bool and not differentiable, as PyTorch's.
#include "ops/elementwise_common.h"
#include "backend/elementwise_kernels.h"
#include "dp/ops/elementwise.h"

namespace dp {
namespace {

enum class BoolOp { And, Or, Xor };

// out (bool, broadcast shape) = a op b, both already bool.
Tensor bool_binary(const char* op, BoolOp k, const Tensor& a, const Tensor& b) {
  Tensor out = ops::new_output_like(a, b, op, kBool, a.device());
  switch (k) {
    case BoolOp::And:
      backend::mul_kernel(out.device().type, out, a, b);
      break;
    case BoolOp::Or:
      backend::add_kernel(out.device().type, out, a, b, 1);
      break;
    case BoolOp::Xor:
      backend::compare_kernel(out.device().type, backend::CmpOp::Ne, out, a, b);
      break;
  }
  return out;
}

// Truth values: x != 0 (NaN is true), as torch.logical_* read their operands.
Tensor truth(const Tensor& t) { return ops::to_dtype(t, kBool); }

Tensor logical(const char* op, BoolOp k, const Tensor& a, const Tensor& b) {
  ops::check_binary(op, a, b);
  ops::out_shape(a, b, op);  // a shape mismatch names this op, before any conversion runs
  return bool_binary(op, k, truth(a), truth(b));
}

void check_bool(const char* op, const Tensor& a, const Tensor& b) {
  DP_CHECK(a.dtype() == kBool && b.dtype() == kBool, DTypeError, op, ": only Bool tensors are supported here, got ", ops::torch_type_name(a.dtype()),
           " ", a.size_str(), " and ", ops::torch_type_name(b.dtype()), " ", b.size_str(), " (logical_and/or/xor test the truth of numbers)");
}

Tensor bitwise(const char* op, BoolOp k, const Tensor& a, const Tensor& b) {
  ops::check_binary(op, a, b);
  check_bool(op, a, b);
  return bool_binary(op, k, a, b);
}

}  // namespace

Tensor logical_and(const Tensor& a, const Tensor& b) { return logical("logical_and", BoolOp::And, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return logical("logical_or", BoolOp::Or, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return logical("logical_xor", BoolOp::Xor, a, b); }

Tensor bitwise_and(const Tensor& a, const Tensor& b) { return bitwise("bitwise_and", BoolOp::And, a, b); }
Tensor bitwise_or(const Tensor& a, const Tensor& b) { return bitwise("bitwise_or", BoolOp::Or, a, b); }
Tensor bitwise_xor(const Tensor& a, const Tensor& b) { return bitwise("bitwise_xor", BoolOp::Xor, a, b); }

Tensor bitwise_not(const Tensor& a) {
  ops::check_input("bitwise_not", a);
  DP_CHECK(a.dtype() == kBool, DTypeError, "bitwise_not: only Bool tensors are supported here, got ", ops::torch_type_name(a.dtype()), " ",
           a.size_str(), " (logical_not tests the truth of numbers)");
  return logical_not(a);
}

}  // namespace dp
