// Binary arithmetic: add, sub, rsub, mul, div, pow, maximum, minimum, lerp, where — kernels and
// the differentiable ops.
#include <cmath>
#include "core/kernels/elementwise_common.h"
#include "core/kernels/elementwise_kernels.h"

namespace dp {
namespace kernels {
namespace {

bool is_one(const Scalar& s) { return !s.is_bool() && s.to_double() == 1.0; }

}  // namespace

void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (out.dtype() == kBool) {
    const bool al = alpha.to<bool>();
    launch<bool, bool, bool>(out, [al](bool x, bool y) { return x || (al && y); }, a, b);
    return;
  }
  dispatch_numeric(out.dtype(), "add", [&]<typename T>() {
    using M = opmath_t<T>;
    if (is_one(alpha)) {
      launch<T, T, T>(out, [](T x, T y) { return st<T>(wadd(om(x), om(y))); }, a, b);
    } else {
      const M al = om(scalar_to<T>(alpha));
      launch<T, T, T>(out, [al](T x, T y) { return st<T>(wadd(om(x), wmul(al, om(y)))); }, a, b);
    }
  });
}

void add_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s, const Scalar& alpha) {
  if (out.dtype() == kBool) {
    const bool c = alpha.to<bool>() && s.to<bool>();
    launch<bool, bool>(out, [c](bool x) { return x || c; }, a);
    return;
  }
  dispatch_numeric(out.dtype(), "add", [&]<typename T>() {
    using M = opmath_t<T>;
    const M c = wmul(om(scalar_to<T>(alpha)), om(scalar_to<T>(s)));
    launch<T, T>(out, [c](T x) { return st<T>(wadd(om(x), c)); }, a);
  });
}

void rsub_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) {
  dispatch_numeric(out.dtype(), "rsub", [&]<typename T>() {
    using M = opmath_t<T>;
    const M c = om(scalar_to<T>(s));
    launch<T, T>(out, [c](T x) { return st<T>(wsub(c, om(x))); }, a);
  });
}

void mul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kBool) {
    launch<bool, bool, bool>(out, [](bool x, bool y) { return x && y; }, a, b);
    return;
  }
  dispatch_numeric(out.dtype(), "mul", [&]<typename T>() {
    launch<T, T, T>(out, [](T x, T y) { return st<T>(wmul(om(x), om(y))); }, a, b);
  });
}

void mul_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) {
  if (out.dtype() == kBool) {
    const bool c = s.to<bool>();
    launch<bool, bool>(out, [c](bool x) { return x && c; }, a);
    return;
  }
  dispatch_numeric(out.dtype(), "mul", [&]<typename T>() {
    using M = opmath_t<T>;
    const M c = om(scalar_to<T>(s));
    launch<T, T>(out, [c](T x) { return st<T>(wmul(om(x), c)); }, a);
  });
}

void div_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_floating(out.dtype(), "div", [&]<typename T>() {
    launch<T, T, T>(out, [](T x, T y) { return st<T>(om(x) / om(y)); }, a, b);
  });
}

void div_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) {
  dispatch_floating(out.dtype(), "div", [&]<typename T>() {
    using M = opmath_t<T>;
    const M c = om(scalar_to<T>(s));
    launch<T, T>(out, [c](T x) { return st<T>(om(x) / c); }, a);
  });
}

void rdiv_scalar_kernel(const Tensor& out, const Scalar& s, const Tensor& a) {
  dispatch_floating(out.dtype(), "div", [&]<typename T>() {
    using M = opmath_t<T>;
    const M c = om(scalar_to<T>(s));
    launch<T, T>(out, [c](T x) { return st<T>(c / om(x)); }, a);
  });
}

void pow_kernel(const Tensor& out, const Tensor& a, const Tensor& e) {
  dispatch_numeric(out.dtype(), "pow", [&]<typename T>() {
    if constexpr (is_float_v<T>) {
      launch<T, T, T>(out, [](T x, T y) { return st<T>(std::pow(om(x), om(y))); }, a, e);
    } else {
      launch<T, T, T>(out, [](T x, T y) { return int_pow(x, y); }, a, e);
    }
  });
}

void pow_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& e) {
  dispatch_numeric(out.dtype(), "pow", [&]<typename T>() {
    if constexpr (is_float_v<T>) {
      using M = opmath_t<T>;
      const double d = e.to_double();
      // The exponents PyTorch computes without pow (exact squares and cubes, sqrt, reciprocals).
      if (d == 2.0) launch<T, T>(out, [](T x) { return st<T>(om(x) * om(x)); }, a);
      else if (d == 3.0) launch<T, T>(out, [](T x) { return st<T>(om(x) * om(x) * om(x)); }, a);
      else if (d == 1.0) launch<T, T>(out, [](T x) { return x; }, a);
      else if (d == 0.5) launch<T, T>(out, [](T x) { return st<T>(std::sqrt(om(x))); }, a);
      else if (d == -0.5) launch<T, T>(out, [](T x) { return st<T>(M(1) / std::sqrt(om(x))); }, a);
      else if (d == -1.0) launch<T, T>(out, [](T x) { return st<T>(M(1) / om(x)); }, a);
      else if (d == -2.0) launch<T, T>(out, [](T x) { return st<T>(M(1) / (om(x) * om(x))); }, a);
      else {
        const M c = om(scalar_to<T>(e));
        launch<T, T>(out, [c](T x) { return st<T>(std::pow(om(x), c)); }, a);
      }
    } else {
      DP_CHECK(e.to_int() >= 0, ValueError, "pow: Integers to negative integer powers are not allowed.");
      const T c = scalar_to<T>(e);
      launch<T, T>(out, [c](T x) { return int_pow(x, c); }, a);
    }
  });
}

void rpow_scalar_kernel(const Tensor& out, const Scalar& base, const Tensor& e) {
  dispatch_numeric(out.dtype(), "pow", [&]<typename T>() {
    if constexpr (is_float_v<T>) {
      using M = opmath_t<T>;
      const M c = om(scalar_to<T>(base));
      launch<T, T>(out, [c](T y) { return st<T>(std::pow(c, om(y))); }, e);
    } else {
      const T c = scalar_to<T>(base);
      launch<T, T>(out, [c](T y) { return int_pow(c, y); }, e);
    }
  });
}

void maximum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kBool) {
    launch<bool, bool, bool>(out, [](bool x, bool y) { return x || y; }, a, b);
    return;
  }
  dispatch_numeric(out.dtype(), "maximum", [&]<typename T>() {
    launch<T, T, T>(out, [](T x, T y) {
      auto u = om(x), v = om(y);
      if constexpr (is_float_v<T>) return st<T>(u != u ? u : (v != v ? v : (u > v ? u : v)));
      else return u > v ? x : y;
    }, a, b);
  });
}

void minimum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kBool) {
    launch<bool, bool, bool>(out, [](bool x, bool y) { return x && y; }, a, b);
    return;
  }
  dispatch_numeric(out.dtype(), "minimum", [&]<typename T>() {
    launch<T, T, T>(out, [](T x, T y) {
      auto u = om(x), v = om(y);
      if constexpr (is_float_v<T>) return st<T>(u != u ? u : (v != v ? v : (u < v ? u : v)));
      else return u < v ? x : y;
    }, a, b);
  });
}

void extremum_weight_kernel(const Tensor& out, const Tensor& a, const Tensor& b, bool is_max) {
  dispatch_floating(out.dtype(), "maximum_backward", [&]<typename T>() {
    using M = opmath_t<T>;
    if (is_max) launch<T, T, T>(out, [](T x, T y) { return st<T>(om(x) > om(y) ? M(1) : om(x) == om(y) ? M(0.5) : M(0)); }, a, b);
    else launch<T, T, T>(out, [](T x, T y) { return st<T>(om(x) < om(y) ? M(1) : om(x) == om(y) ? M(0.5) : M(0)); }, a, b);
  });
}

void lerp_kernel(const Tensor& out, const Tensor& a, const Tensor& end, const Scalar& weight) {
  dispatch_floating(out.dtype(), "lerp", [&]<typename T>() {
    using M = opmath_t<T>;
    const M w = om(scalar_to<T>(weight));
    // PyTorch's formula: from the nearer end, so lerp(a, b, 1) == b exactly.
    if (std::abs(w) < M(0.5)) {
      launch<T, T, T>(out, [w](T x, T y) { return st<T>(om(x) + w * (om(y) - om(x))); }, a, end);
    } else {
      const M w1 = M(1) - w;
      launch<T, T, T>(out, [w1](T x, T y) { return st<T>(om(y) - (om(y) - om(x)) * w1); }, a, end);
    }
  });
}

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(out.dtype(), "where", [&]<typename T>() {
    launch<T, bool, T, T>(out, [](bool c, T x, T y) { return c ? x : y; }, cond, a, b);
  });
}

void where_scalar_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Scalar& b) {
  dispatch_all(out.dtype(), "where", [&]<typename T>() {
    const T v = scalar_to<T>(b);
    launch<T, bool, T>(out, [v](bool c, T x) { return c ? x : v; }, cond, a);
  });
}

void addcmul_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  dispatch_numeric(out.dtype(), "addcmul_", [&]<typename T>() {
    using M = opmath_t<T>;
    const M v = om(scalar_to<T>(value));
    launch<T, T, T, T>(out, [v](T s, T x, T y) { return st<T>(wadd(om(s), wmul(v, wmul(om(x), om(y))))); }, self, a, b);
  });
}

void addcdiv_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  dispatch_floating(out.dtype(), "addcdiv_", [&]<typename T>() {
    using M = opmath_t<T>;
    const M v = om(scalar_to<T>(value));
    launch<T, T, T, T>(out, [v](T s, T x, T y) { return st<T>(om(s) + v * (om(x) / om(y))); }, self, a, b);
  });
}

}  // namespace kernels

// ================================================================ differentiable ops

using ops::check_alpha;
using ops::check_sub;
using ops::GradInfo;
using ops::negate;
using ops::record;
using ops::unpack_output;
using autograd::SavedVariable;
using autograd::Node;
using autograd::variable_list;

namespace {

Tensor add_impl(const char* op, const char* node, const Tensor& a, const Tensor& b, const Scalar& alpha, bool is_sub) {
  ops::check_binary(op, a, b);
  const DType ct = result_type(a, b);
  if (is_sub) check_sub(op, a.dtype(), b.dtype());
  check_alpha(op, ct, alpha);
  const Scalar k = is_sub ? negate(alpha) : alpha;
  Tensor out = ops::new_output_like(a, b, op, ct, a.device());
  kernels::add_kernel(out, ops::to_dtype(a, ct), ops::to_dtype(b, ct), k);
  if (autograd::needs_grad(a, b)) {
    record(node, {&a, &b}, out, [ia = GradInfo(a), ib = GradInfo(b), k](Node&, const Tensor& g) {
      Tensor gb;
      if (ib.needed) gb = ib.reduce(k.to_double() == 1.0 ? g : k.to_double() == -1.0 ? dp::neg(g) : dp::mul(g, k));
      return variable_list{ia.needed ? ia.reduce(g) : Tensor(), gb};
    });
  }
  return out;
}

Tensor add_scalar_impl(const char* op, const char* node, const Tensor& a, const Scalar& b, const Scalar& alpha, bool is_sub) {
  ops::check_input(op, a);
  const DType ct = result_type(a, b);
  if (is_sub) check_sub(op, a.dtype(), b.is_bool() ? kBool : kInt64);
  check_alpha(op, ct, alpha);
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  kernels::add_scalar_kernel(out, ops::to_dtype(a, ct), b, is_sub ? negate(alpha) : alpha);
  if (autograd::needs_grad(a)) {
    record(node, {&a}, out, [ia = GradInfo(a)](Node&, const Tensor& g) { return variable_list{ia.reduce(g)}; });
  }
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) { return add_impl("add", "AddBackward0", a, b, alpha, false); }
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) { return add_impl("sub", "SubBackward0", a, b, alpha, true); }
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha) { return add_scalar_impl("add", "AddBackward1", a, b, alpha, false); }
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha) { return add_scalar_impl("sub", "SubBackward1", a, b, alpha, true); }

Tensor rsub(const Tensor& a, const Scalar& b) {
  ops::check_input("rsub", a);
  const DType ct = result_type(a, b);
  check_sub("rsub", a.dtype(), b.is_bool() ? kBool : kInt64);
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  kernels::rsub_scalar_kernel(out, ops::to_dtype(a, ct), b);
  if (autograd::needs_grad(a)) {
    record("RsubBackward1", {&a}, out, [ia = GradInfo(a)](Node&, const Tensor& g) { return variable_list{ia.reduce(dp::neg(g))}; });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  ops::check_binary("mul", a, b);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output_like(a, b, "mul", ct, a.device());
  kernels::mul_kernel(out, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
  if (autograd::needs_grad(a, b)) {
    GradInfo ia(a), ib(b);
    SavedVariable sa = ib.needed ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb = ia.needed ? SavedVariable(b, false) : SavedVariable();
    record("MulBackward0", {&a, &b}, out, [ia = std::move(ia), ib = std::move(ib), sa = std::move(sa), sb = std::move(sb)](Node& n, const Tensor& g) {
      return variable_list{ia.needed ? ia.reduce(dp::mul(g, sb.unpack(&n))) : Tensor(),
                           ib.needed ? ib.reduce(dp::mul(g, sa.unpack(&n))) : Tensor()};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Scalar& b) {
  ops::check_input("mul", a);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  kernels::mul_scalar_kernel(out, ops::to_dtype(a, ct), b);
  if (autograd::needs_grad(a)) {
    record("MulBackward1", {&a}, out, [ia = GradInfo(a), b](Node&, const Tensor& g) { return variable_list{ia.reduce(dp::mul(g, b))}; });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  ops::check_binary("div", a, b);
  const DType ct = ops::to_float_dtype(result_type(a, b));
  Tensor out = ops::new_output_like(a, b, "div", ct, a.device());
  kernels::div_kernel(out, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
  if (autograd::needs_grad(a, b)) {
    GradInfo ia(a), ib(b);
    SavedVariable sa = ib.needed ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb(b, false);
    record("DivBackward0", {&a, &b}, out, [ia = std::move(ia), ib = std::move(ib), sa = std::move(sa), sb = std::move(sb)](Node& n, const Tensor& g) {
      Tensor bv = sb.unpack(&n);
      Tensor ga, gb;
      if (ia.needed) ga = ia.reduce(dp::div(g, bv));
      if (ib.needed) gb = ib.reduce(dp::mul(dp::neg(g), dp::div(dp::div(sa.unpack(&n), bv), bv)));
      return variable_list{ga, gb};
    });
  }
  return out;
}

Tensor div(const Tensor& a, const Scalar& b) {
  ops::check_input("div", a);
  const DType ct = ops::to_float_dtype(result_type(a, b));
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  kernels::div_scalar_kernel(out, ops::to_dtype(a, ct), b);
  if (autograd::needs_grad(a)) {
    record("DivBackward1", {&a}, out, [ia = GradInfo(a), b](Node&, const Tensor& g) { return variable_list{ia.reduce(dp::div(g, b))}; });
  }
  return out;
}

Tensor div(const Scalar& a, const Tensor& b) {
  ops::check_input("div", b);
  const DType ct = ops::to_float_dtype(result_type(b, a));
  Tensor out = ops::new_output(b.sizes(), ct, b.device());
  kernels::rdiv_scalar_kernel(out, a, ops::to_dtype(b, ct));
  if (autograd::needs_grad(b)) {
    // d(a / b)/db = -a / b^2 = -out / b
    record("DivBackward2", {&b}, out, [ib = GradInfo(b), sb = SavedVariable(b, false), so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      return variable_list{ib.reduce(dp::div(dp::mul(dp::neg(g), unpack_output(so, n)), sb.unpack(&n)))};
    });
  }
  return out;
}

// ---- pow ----

Tensor pow(const Tensor& a, const Scalar& e) {
  ops::check_input("pow", a);
  const DType ct = result_type(a, e);
  DP_CHECK(ct != kBool, DTypeError, "pow: not implemented for bool");
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  kernels::pow_scalar_kernel(out, ops::to_dtype(a, ct), e);
  if (autograd::needs_grad(a)) {
    record("PowBackward0", {&a}, out, [ia = GradInfo(a), sa = SavedVariable(a, false), e](Node& n, const Tensor& g) {
      if (e.to_double() == 0.0) return variable_list{ops::zeros_of(ia.sizes, ia.dtype, g.device())};
      Tensor x = sa.unpack(&n);
      const Scalar em1 = e.is_floating_point() ? Scalar(e.to_double() - 1.0) : Scalar(e.to_int() - 1);
      Tensor d = e.to_double() == 1.0 ? g : e.to_double() == 2.0 ? dp::mul(g, dp::mul(x, e)) : dp::mul(g, dp::mul(dp::pow(x, em1), e));
      return variable_list{ia.reduce(d)};
    });
  }
  return out;
}

Tensor pow(const Tensor& a, const Tensor& e) {
  ops::check_binary("pow", a, e);
  const DType ct = result_type(a, e);
  DP_CHECK(ct != kBool, DTypeError, "pow: not implemented for bool");
  Tensor out = ops::new_output_like(a, e, "pow", ct, a.device());
  kernels::pow_kernel(out, ops::to_dtype(a, ct), ops::to_dtype(e, ct));
  if (autograd::needs_grad(a, e)) {
    record("PowBackward1", {&a, &e}, out,
           [ia = GradInfo(a), ie = GradInfo(e), sa = SavedVariable(a, false), se = SavedVariable(e, false), so = SavedVariable(out, true)](
               Node& n, const Tensor& g) {
             Tensor x = sa.unpack(&n), y = se.unpack(&n);
             Tensor ga, ge;
             if (ia.needed) {
               // where(e == 0, 0, g * e * x^(e-1))
               ga = ia.reduce(dp::where(dp::ne(y, 0), dp::mul(g, dp::mul(y, dp::pow(x, dp::sub(y, 1)))), 0));
             }
             if (ie.needed) {
               // where(x == 0 & e >= 0, 0, g * out * log(x))
               Tensor zero_base = dp::mul(dp::eq(x, 0), dp::ge(y, 0));
               ge = ie.reduce(dp::mul(g, dp::where(dp::logical_not(zero_base), dp::mul(unpack_output(so, n), dp::log(x)), 0)));
             }
             return variable_list{ga, ge};
           });
  }
  return out;
}

Tensor pow(const Scalar& a, const Tensor& e) {
  ops::check_input("pow", e);
  const DType ct = result_type(e, a);
  DP_CHECK(ct != kBool, DTypeError, "pow: not implemented for bool");
  Tensor out = ops::new_output(e.sizes(), ct, e.device());
  kernels::rpow_scalar_kernel(out, a, ops::to_dtype(e, ct));
  if (autograd::needs_grad(e)) {
    record("PowBackward2", {&e}, out, [ie = GradInfo(e), se = SavedVariable(e, false), so = SavedVariable(out, true), a](Node& n, const Tensor& g) {
      const double base = a.to_double();
      Tensor r = unpack_output(so, n);
      Tensor d;
      if (base == 0.0) {
        d = dp::mul(g, dp::where(dp::lt(se.unpack(&n), 0), dp::mul(r, -INFINITY), 0));
      } else {
        d = dp::mul(g, dp::mul(r, std::log(base)));
      }
      return variable_list{ie.reduce(d)};
    });
  }
  return out;
}

// ---- maximum / minimum ----

namespace {
Tensor extremum(const char* op, const char* node, const Tensor& a, const Tensor& b, bool is_max) {
  ops::check_binary(op, a, b);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output_like(a, b, op, ct, a.device());
  Tensor ac = ops::to_dtype(a, ct), bc = ops::to_dtype(b, ct);
  if (is_max) kernels::maximum_kernel(out, ac, bc);
  else kernels::minimum_kernel(out, ac, bc);
  if (autograd::needs_grad(a, b)) {
    record(node, {&a, &b}, out, [ia = GradInfo(a), ib = GradInfo(b), sa = SavedVariable(a, false), sb = SavedVariable(b, false), is_max,
                                 shape = out.sizes(), ct](Node& n, const Tensor& g) {
      Tensor x = ops::to_dtype(sa.unpack(&n), ct), y = ops::to_dtype(sb.unpack(&n), ct);
      Tensor w = ops::new_output(shape, ct, g.device());
      kernels::extremum_weight_kernel(w, x, y, is_max);  // 1 where a wins, 0.5 on ties
      Tensor ga, gb;
      if (ia.needed) ga = ia.reduce(dp::mul(g, w));
      if (ib.needed) gb = ib.reduce(dp::mul(g, dp::rsub(w, 1)));
      return variable_list{ga, gb};
    });
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum("maximum", "MaximumBackward0", a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum("minimum", "MinimumBackward0", a, b, false); }

// ---- lerp ----

Tensor lerp(const Tensor& a, const Tensor& end, const Scalar& weight) {
  ops::check_binary("lerp", a, end);
  DP_CHECK(a.dtype() == end.dtype(), DTypeError, "lerp: expected dtype ", dtype_name(a.dtype()), " for `end` but got dtype ",
           dtype_name(end.dtype()));
  DP_CHECK(is_floating_point(a.dtype()), DTypeError, "lerp: expected floating point tensors, got ", dtype_name(a.dtype()));
  Tensor out = ops::new_output_like(a, end, "lerp", a.dtype(), a.device());
  kernels::lerp_kernel(out, a, end, weight);
  if (autograd::needs_grad(a, end)) {
    record("LerpBackward0", {&a, &end}, out, [ia = GradInfo(a), ie = GradInfo(end), weight](Node&, const Tensor& g) {
      const double w = weight.to_double();
      return variable_list{ia.needed ? ia.reduce(dp::mul(g, 1.0 - w)) : Tensor(), ie.needed ? ie.reduce(dp::mul(g, w)) : Tensor()};
    });
  }
  return out;
}

// ---- where ----

namespace {
void check_cond(const Tensor& cond) {
  DP_CHECK(cond.dtype() == kBool, DTypeError, "where: expected condition to be a bool tensor, but got a tensor with dtype ",
           dtype_name(cond.dtype()));
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ops::check_input("where", cond);
  ops::check_binary("where", a, b);
  if (cond.device() != a.device()) ops::check_same_device("where", {&cond, &a});
  check_cond(cond);
  const DType ct = result_type(a, b);
  Shape shape = ops::out_shape(a, b, "where");
  if (!IntArrayRef(shape).equals(cond.sizes())) shape = broadcast_shapes(cond.sizes(), shape, "where");
  Tensor out = ops::new_output(shape, ct, a.device());
  kernels::where_kernel(out, cond, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
  if (autograd::needs_grad(a, b)) {
    record("WhereBackward0", {&a, &b}, out, [ia = GradInfo(a), ib = GradInfo(b), sc = SavedVariable(cond, false)](Node& n, const Tensor& g) {
      Tensor c = sc.unpack(&n);
      return variable_list{ia.needed ? ia.reduce(dp::where(c, g, 0)) : Tensor(),
                           ib.needed ? ib.reduce(dp::where(dp::logical_not(c), g, 0)) : Tensor()};
    });
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) {
  ops::check_input("where", cond);
  ops::check_input("where", a);
  if (cond.device() != a.device()) ops::check_same_device("where", {&cond, &a});
  check_cond(cond);
  const DType ct = result_type(a, b);
  Shape shape = a.sizes() == cond.sizes() ? a.sizes() : broadcast_shapes(cond.sizes(), a.sizes(), "where");
  Tensor out = ops::new_output(shape, ct, a.device());
  kernels::where_scalar_kernel(out, cond, ops::to_dtype(a, ct), b);
  if (autograd::needs_grad(a)) {
    record("WhereBackward0", {&a}, out, [ia = GradInfo(a), sc = SavedVariable(cond, false)](Node& n, const Tensor& g) {
      return variable_list{ia.reduce(dp::where(sc.unpack(&n), g, 0))};
    });
  }
  return out;
}

}  // namespace dp
