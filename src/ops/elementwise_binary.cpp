// Binary arithmetic: add, sub, rsub, mul, div, pow, maximum, minimum, lerp, where — the
// differentiable ops (their kernels: backend/elementwise_kernels.h).
#include <cmath>
#include "ops/elementwise_common.h"
#include "backend/elementwise_kernels.h"
#include "amp/autocast_ops.h"

namespace dp {

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
  backend::add_kernel(out.device().type, out, ops::to_dtype(a, ct), ops::to_dtype(b, ct), k);
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
  backend::add_scalar_kernel(out.device().type, out, ops::to_dtype(a, ct), b, is_sub ? negate(alpha) : alpha);
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
  backend::rsub_scalar_kernel(out.device().type, out, ops::to_dtype(a, ct), b);
  if (autograd::needs_grad(a)) {
    record("RsubBackward1", {&a}, out, [ia = GradInfo(a)](Node&, const Tensor& g) { return variable_list{ia.reduce(dp::neg(g))}; });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  ops::check_binary("mul", a, b);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output_like(a, b, "mul", ct, a.device());
  backend::mul_kernel(out.device().type, out, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
  if (autograd::needs_grad(a, b)) {
    GradInfo ia(a), ib(b);
    SavedVariable sa = ib.needed ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb = ia.needed ? SavedVariable(b, false) : SavedVariable();
    record("MulBackward0", {&a, &b}, out, [ia = std::move(ia), ib = std::move(ib), sa = std::move(sa), sb = std::move(sb)](Node& n, const Tensor& g) {
      return variable_list{ia.needed ? ia.reduce(dp::mul(g, sb.unpack(&n))) : Tensor(), ib.needed ? ib.reduce(dp::mul(g, sa.unpack(&n))) : Tensor()};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Scalar& b) {
  ops::check_input("mul", a);
  const DType ct = result_type(a, b);
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  backend::mul_scalar_kernel(out.device().type, out, ops::to_dtype(a, ct), b);
  if (autograd::needs_grad(a)) {
    record("MulBackward1", {&a}, out, [ia = GradInfo(a), b](Node&, const Tensor& g) { return variable_list{ia.reduce(dp::mul(g, b))}; });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  ops::check_binary("div", a, b);
  const DType ct = ops::to_float_dtype(result_type(a, b));
  Tensor out = ops::new_output_like(a, b, "div", ct, a.device());
  backend::div_kernel(out.device().type, out, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
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
  backend::div_scalar_kernel(out.device().type, out, ops::to_dtype(a, ct), b);
  if (autograd::needs_grad(a)) {
    record("DivBackward1", {&a}, out, [ia = GradInfo(a), b](Node&, const Tensor& g) { return variable_list{ia.reduce(dp::div(g, b))}; });
  }
  return out;
}

Tensor div(const Scalar& a, const Tensor& b) {
  ops::check_input("div", b);
  const DType ct = ops::to_float_dtype(result_type(b, a));
  Tensor out = ops::new_output(b.sizes(), ct, b.device());
  backend::rdiv_scalar_kernel(out.device().type, out, a, ops::to_dtype(b, ct));
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
  if (autocast::detail::Cast ac{autocast::detail::Op::pow, {&a}}) return ac([&] { return dp::pow(ac[0], e); });
  ops::check_input("pow", a);
  const DType ct = result_type(a, e);
  DP_CHECK(ct != kBool, DTypeError, "pow: not implemented for bool");
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  backend::pow_scalar_kernel(out.device().type, out, ops::to_dtype(a, ct), e);
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
  if (autocast::detail::Cast ac{autocast::detail::Op::pow, {&a, &e}}) return ac([&] { return dp::pow(ac[0], ac[1]); });
  ops::check_binary("pow", a, e);
  const DType ct = result_type(a, e);
  DP_CHECK(ct != kBool, DTypeError, "pow: not implemented for bool");
  Tensor out = ops::new_output_like(a, e, "pow", ct, a.device());
  backend::pow_kernel(out.device().type, out, ops::to_dtype(a, ct), ops::to_dtype(e, ct));
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
  if (autocast::detail::Cast ac{autocast::detail::Op::pow, {&e}}) return ac([&] { return dp::pow(a, ac[0]); });
  ops::check_input("pow", e);
  const DType ct = result_type(e, a);
  DP_CHECK(ct != kBool, DTypeError, "pow: not implemented for bool");
  Tensor out = ops::new_output(e.sizes(), ct, e.device());
  backend::rpow_scalar_kernel(out.device().type, out, a, ops::to_dtype(e, ct));
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
  if (is_max)
    backend::maximum_kernel(out.device().type, out, ac, bc);
  else
    backend::minimum_kernel(out.device().type, out, ac, bc);
  if (autograd::needs_grad(a, b)) {
    record(node, {&a, &b}, out,
           [ia = GradInfo(a), ib = GradInfo(b), sa = SavedVariable(a, false), sb = SavedVariable(b, false), is_max, shape = out.sizes(), ct](
               Node& n, const Tensor& g) {
             Tensor x = ops::to_dtype(sa.unpack(&n), ct), y = ops::to_dtype(sb.unpack(&n), ct);
             Tensor w = ops::new_output(shape, ct, g.device());
             backend::extremum_weight_kernel(w.device().type, w, x, y, is_max);  // 1 where a wins, 0.5 on ties
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
  backend::lerp_kernel(out.device().type, out, a, end, weight);
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
  backend::where_kernel(out.device().type, out, cond, ops::to_dtype(a, ct), ops::to_dtype(b, ct));
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
  backend::where_scalar_kernel(out.device().type, out, cond, ops::to_dtype(a, ct), b);
  if (autograd::needs_grad(a)) {
    record("WhereBackward0", {&a}, out, [ia = GradInfo(a), sc = SavedVariable(cond, false)](Node& n, const Tensor& g) {
      return variable_list{ia.reduce(dp::where(sc.unpack(&n), g, 0))};
    });
  }
  return out;
}

}  // namespace dp
