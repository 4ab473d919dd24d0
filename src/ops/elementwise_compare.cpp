// Comparisons (bool results, computed in the promoted dtype), logical_not, equal, allclose.
#include <cmath>
#include "ops/elementwise_common.h"
#include "backend/elementwise_kernels.h"

namespace dp {
namespace {

Tensor compare(const char* op, kernels::CmpOp k, const Tensor& a, const Tensor& b) {
  ops::check_binary(op, a, b);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output_like(a, b, op, kBool, a.device());
  kernels::compare_kernel(k, out, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
  return out;
}

Tensor compare(const char* op, kernels::CmpOp k, const Tensor& a, const Scalar& b) {
  ops::check_input(op, a);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output(a.sizes(), kBool, a.device());
  kernels::compare_scalar_kernel(k, out, ops::to_dtype(a, ct), b);
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

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", kernels::CmpOp::Eq, a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return compare("eq", kernels::CmpOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", kernels::CmpOp::Ne, a, b); }
Tensor ne(const Tensor& a, const Scalar& b) { return compare("ne", kernels::CmpOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", kernels::CmpOp::Lt, a, b); }
Tensor lt(const Tensor& a, const Scalar& b) { return compare("lt", kernels::CmpOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", kernels::CmpOp::Le, a, b); }
Tensor le(const Tensor& a, const Scalar& b) { return compare("le", kernels::CmpOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", kernels::CmpOp::Gt, a, b); }
Tensor gt(const Tensor& a, const Scalar& b) { return compare("gt", kernels::CmpOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", kernels::CmpOp::Ge, a, b); }
Tensor ge(const Tensor& a, const Scalar& b) { return compare("ge", kernels::CmpOp::Ge, a, b); }

Tensor logical_not(const Tensor& a) {
  ops::check_input("logical_not", a);
  Tensor out = ops::new_output(a.sizes(), kBool, a.device());
  kernels::logical_not_kernel(out, a);
  return out;
}

bool equal(const Tensor& a, const Tensor& b) {
  ops::check_binary("equal", a, b);
  if (a.sizes() != b.sizes()) return false;
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output(a.sizes(), kBool, a.device());
  kernels::compare_kernel(kernels::CmpOp::Eq, out, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
  return all_true(out);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  ops::check_binary("allclose", a, b);
  DP_CHECK(a.dtype() == b.dtype(), DTypeError, "allclose: ", ops::torch_type_name(a.dtype()), " did not match ", ops::torch_type_name(b.dtype()));
  DP_CHECK(rtol >= 0, ValueError, "allclose: rtol must be greater than or equal to zero, but got ", rtol);
  DP_CHECK(atol >= 0, ValueError, "allclose: atol must be greater than or equal to zero, but got ", atol);
  // Device operands are compared on the host (the check below is a host loop; no device reduction yet).
  if (!a.is_cpu() || !b.is_cpu()) return allclose(a.to(Device::cpu()), b.to(Device::cpu()), rtol, atol);
  Tensor out = ops::new_output_like(a, b, "allclose", kBool, a.device());
  kernels::dispatch_all(a.dtype(), "allclose", [&]<typename T>() {
    kernels::launch<bool, T, T>(
        out,
        [rtol, atol](T x, T y) {
          const double u = kernels::convert<double>(x), v = kernels::convert<double>(y);
          if (u == v) return true;  // also equal infinities
          const double err = std::fabs(u - v);
          return std::isfinite(err) && err <= atol + std::fabs(rtol * v);
        },
        a, b);
  });
  return all_true(out);
}

}  // namespace dp
