// Comparisons (bool results, computed in the promoted dtype), logical_not, equal, allclose.
#include <cmath>
#include <limits>
#include "ops/elementwise_common.h"
#include "backend/elementwise_kernels.h"
#include "dp/autograd/grad_mode.h"

namespace dp {
namespace {

Tensor compare(const char* op, backend::CmpOp k, const Tensor& a, const Tensor& b) {
  ops::check_binary(op, a, b);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output_like(a, b, op, kBool, a.device());
  backend::compare_kernel(out.device().type, k, out, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
  return out;
}

Tensor compare(const char* op, backend::CmpOp k, const Tensor& a, const Scalar& b) {
  ops::check_input(op, a);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output(a.sizes(), kBool, a.device());
  backend::compare_scalar_kernel(out.device().type, k, out, ops::to_dtype(a, ct), b);
  return out;
}

// True when every element of a fresh contiguous bool tensor is true.
bool all_true(const Tensor& t_in) {
  // A device mask is read on the host (no device reduction yet); the copy waits for the device.
  const Tensor t = t_in.is_cpu() ? t_in : t_in.to(Device::cpu());
  const bool* p = static_cast<const bool*>(t.data_ptr());
  const int64_t n = t.numel();
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= p[i];
  return ok;
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", backend::CmpOp::Eq, a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return compare("eq", backend::CmpOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", backend::CmpOp::Ne, a, b); }
Tensor ne(const Tensor& a, const Scalar& b) { return compare("ne", backend::CmpOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", backend::CmpOp::Lt, a, b); }
Tensor lt(const Tensor& a, const Scalar& b) { return compare("lt", backend::CmpOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", backend::CmpOp::Le, a, b); }
Tensor le(const Tensor& a, const Scalar& b) { return compare("le", backend::CmpOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", backend::CmpOp::Gt, a, b); }
Tensor gt(const Tensor& a, const Scalar& b) { return compare("gt", backend::CmpOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", backend::CmpOp::Ge, a, b); }
Tensor ge(const Tensor& a, const Scalar& b) { return compare("ge", backend::CmpOp::Ge, a, b); }

Tensor logical_not(const Tensor& a) {
  ops::check_input("logical_not", a);
  Tensor out = ops::new_output(a.sizes(), kBool, a.device());
  backend::logical_not_kernel(out.device().type, out, a);
  return out;
}

bool equal(const Tensor& a, const Tensor& b) {
  ops::check_binary("equal", a, b);
  if (a.sizes() != b.sizes()) return false;
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output(a.sizes(), kBool, a.device());
  backend::compare_kernel(out.device().type, backend::CmpOp::Eq, out, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
  return all_true(out);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  ops::check_binary("allclose", a, b);
  DP_CHECK(a.dtype() == b.dtype(), DTypeError, "allclose: ", ops::torch_type_name(a.dtype()), " did not match ", ops::torch_type_name(b.dtype()));
  DP_CHECK(rtol >= 0, ValueError, "allclose: rtol must be greater than or equal to zero, but got ", rtol);
  DP_CHECK(atol >= 0, ValueError, "allclose: atol must be greater than or equal to zero, but got ", atol);
  // |a - b| <= atol + rtol |b| in float64 (integers exactly up to 2^53), or equal (equal
  // infinities too); a NaN or an infinite difference is never close. Written with the ops, so it runs
  // on the operands' device.
  NoGradGuard no_grad;
  const Tensor u = ops::to_dtype(a, kFloat64), v = ops::to_dtype(b, kFloat64);
  const Tensor err = dp::abs(dp::sub(u, v));
  const Tensor within = dp::logical_and(dp::lt(err, Scalar(std::numeric_limits<double>::infinity())),
                                        dp::le(err, dp::add(dp::abs(dp::mul(v, Scalar(rtol))), Scalar(atol))));
  return all_true(dp::logical_or(dp::eq(u, v), within));
}

}  // namespace dp
