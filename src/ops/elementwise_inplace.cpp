// In-place ops: add_, sub_, mul_, div_, neg_, sqrt_, relu_, clamp_, addcmul_, addcdiv_, lerp_,
// fill_, zero_, copy_.
//
// Each one: refuses a leaf that requires grad (autograd::check_inplace), computes in the promoted
// dtype, which must cast into self's dtype, broadcasts the other operands to self's shape (self
// never grows), writes self in one pass (any strides), bumps the version counter, and when
// autograd is on records a node that becomes self's new grad_fn (rebase_history), its edges
// taken from self's previous history and the other operands.
#include "backend/copy_kernels.h"
#include "backend/elementwise_kernels.h"
#include "ops/elementwise_common.h"

namespace dp {

using autograd::Node;
using autograd::variable_list;
using autograd::SavedVariable;
using ops::GradInfo;
using ops::record_inplace;
using ops::unpack_output;

namespace {

// The checks every in-place op with one tensor operand (undefined: none) makes, in PyTorch's order.
void prologue(const char* op, const Tensor& self, const Tensor& other, DType ct) {
  ops::check_can_cast(op, ct, self.dtype());
  if (other.defined()) ops::check_inplace_shape(op, self, other);
  ops::check_no_internal_overlap(op, self);
}

void check_operands(const char* op, Tensor& self, const Tensor& other) {
  ops::check_input(op, self);
  autograd::check_inplace(self, op);
  if (other.defined()) ops::check_binary(op, self, other);
}

// other, converted to ct and safe to read while self is written.
Tensor operand(const Tensor& self, const Tensor& other, DType ct) { return ops::to_dtype(ops::unaliased(self, other), ct); }

Tensor& add_inplace(const char* op, const char* node, Tensor& self, const Tensor& b, const Scalar& alpha, bool is_sub) {
  check_operands(op, self, b);
  const DType ct = result_type(self, b);
  if (is_sub) ops::check_sub(op, self.dtype(), b.dtype());
  ops::check_alpha(op, ct, alpha);
  prologue(op, self, b, ct);
  const Scalar k = is_sub ? ops::negate(alpha) : alpha;
  Tensor bc = operand(self, b, ct);
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::add_kernel(out.device().type, out, s, bc, k); });
  self.bump_version();
  if (autograd::needs_grad(self, b)) {
    record_inplace(node, {&self, &b}, self, [is = GradInfo(self), ib = GradInfo(b), k](Node&, const Tensor& g) {
      Tensor gb;
      if (ib.needed) gb = ib.reduce(k.to_double() == 1.0 ? g : k.to_double() == -1.0 ? dp::neg(g) : dp::mul(g, k));
      return variable_list{is.needed ? is.reduce(g) : Tensor(), gb};
    });
  }
  return self;
}

Tensor& add_scalar_inplace(const char* op, const char* node, Tensor& self, const Scalar& b, const Scalar& alpha, bool is_sub) {
  check_operands(op, self, Tensor());
  const DType ct = result_type(self, b);
  if (is_sub) ops::check_sub(op, self.dtype(), b.is_bool() ? kBool : kInt64);
  ops::check_alpha(op, ct, alpha);
  prologue(op, self, Tensor(), ct);
  const Scalar k = is_sub ? ops::negate(alpha) : alpha;
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::add_scalar_kernel(out.device().type, out, s, b, k); });
  self.bump_version();
  if (autograd::needs_grad(self)) {
    record_inplace(node, {&self}, self, [is = GradInfo(self)](Node&, const Tensor& g) { return variable_list{is.reduce(g)}; });
  }
  return self;
}

}  // namespace

Tensor& add_(Tensor& self, const Tensor& b, const Scalar& alpha) { return add_inplace("add_", "AddBackward0", self, b, alpha, false); }
Tensor& sub_(Tensor& self, const Tensor& b, const Scalar& alpha) { return add_inplace("sub_", "SubBackward0", self, b, alpha, true); }
Tensor& add_(Tensor& self, const Scalar& b, const Scalar& alpha) { return add_scalar_inplace("add_", "AddBackward1", self, b, alpha, false); }
Tensor& sub_(Tensor& self, const Scalar& b, const Scalar& alpha) { return add_scalar_inplace("sub_", "SubBackward1", self, b, alpha, true); }

Tensor& mul_(Tensor& self, const Tensor& b) {
  check_operands("mul_", self, b);
  const DType ct = result_type(self, b);
  prologue("mul_", self, b, ct);
  const bool grad = autograd::needs_grad(self, b);
  // b's gradient needs self's value from before the write.
  SavedVariable self_before = grad && b.requires_grad() ? SavedVariable(dp::clone(self), false) : SavedVariable();
  SavedVariable sb = grad && self.requires_grad() ? ops::save_input(b, &self) : SavedVariable();
  Tensor bc = operand(self, b, ct);
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::mul_kernel(out.device().type, out, s, bc); });
  self.bump_version();
  if (grad) {
    record_inplace("MulBackward0", {&self, &b}, self,
                   [is = GradInfo(self), ib = GradInfo(b), sb = std::move(sb), sa = std::move(self_before)](Node& n, const Tensor& g) {
                     return variable_list{is.needed ? is.reduce(dp::mul(g, sb.unpack(&n))) : Tensor(),
                                          ib.needed ? ib.reduce(dp::mul(g, sa.unpack(&n))) : Tensor()};
                   });
  }
  return self;
}

Tensor& mul_(Tensor& self, const Scalar& b) {
  check_operands("mul_", self, Tensor());
  const DType ct = result_type(self, b);
  prologue("mul_", self, Tensor(), ct);
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::mul_scalar_kernel(out.device().type, out, s, b); });
  self.bump_version();
  if (autograd::needs_grad(self)) {
    record_inplace("MulBackward1", {&self}, self,
                   [is = GradInfo(self), b](Node&, const Tensor& g) { return variable_list{is.reduce(dp::mul(g, b))}; });
  }
  return self;
}

Tensor& div_(Tensor& self, const Tensor& b) {
  check_operands("div_", self, b);
  const DType ct = ops::to_float_dtype(result_type(self, b));
  prologue("div_", self, b, ct);
  const bool grad = autograd::needs_grad(self, b);
  SavedVariable self_before = grad && b.requires_grad() ? SavedVariable(dp::clone(self), false) : SavedVariable();
  SavedVariable sb = grad ? ops::save_input(b, &self) : SavedVariable();
  Tensor bc = operand(self, b, ct);
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::div_kernel(out.device().type, out, s, bc); });
  self.bump_version();
  if (grad) {
    record_inplace("DivBackward0", {&self, &b}, self,
                   [is = GradInfo(self), ib = GradInfo(b), sb = std::move(sb), sa = std::move(self_before)](Node& n, const Tensor& g) {
                     Tensor bv = sb.unpack(&n);
                     Tensor gs, gb;
                     if (is.needed) gs = is.reduce(dp::div(g, bv));
                     if (ib.needed) gb = ib.reduce(dp::mul(dp::neg(g), dp::div(dp::div(sa.unpack(&n), bv), bv)));
                     return variable_list{gs, gb};
                   });
  }
  return self;
}

Tensor& div_(Tensor& self, const Scalar& b) {
  check_operands("div_", self, Tensor());
  const DType ct = ops::to_float_dtype(result_type(self, b));
  prologue("div_", self, Tensor(), ct);
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::div_scalar_kernel(out.device().type, out, s, b); });
  self.bump_version();
  if (autograd::needs_grad(self)) {
    record_inplace("DivBackward1", {&self}, self,
                   [is = GradInfo(self), b](Node&, const Tensor& g) { return variable_list{is.reduce(dp::div(g, b))}; });
  }
  return self;
}

Tensor& neg_(Tensor& self) {
  check_operands("neg_", self, Tensor());
  DP_CHECK(self.dtype() != kBool, DTypeError,
           "neg_: Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use the `~` or "
           "`logical_not()` operator instead.");
  prologue("neg_", self, Tensor(), self.dtype());
  backend::unary_kernel(self.device().type, backend::UnaryOp::Neg, self, self);
  self.bump_version();
  if (autograd::needs_grad(self)) record_inplace("NegBackward0", {&self}, self, [](Node&, const Tensor& g) { return variable_list{dp::neg(g)}; });
  return self;
}

Tensor& sqrt_(Tensor& self) {
  check_operands("sqrt_", self, Tensor());
  const DType ct = ops::to_float_dtype(self.dtype());
  prologue("sqrt_", self, Tensor(), ct);
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::unary_kernel(out.device().type, backend::UnaryOp::Sqrt, out, s); });
  self.bump_version();
  if (autograd::needs_grad(self)) {
    record_inplace("SqrtBackward0", {&self}, self, [so = SavedVariable(self, true)](Node& n, const Tensor& g) {
      return variable_list{dp::div(g, dp::mul(unpack_output(so, n), 2))};
    });
  }
  return self;
}

Tensor& relu_(Tensor& self) {
  check_operands("relu_", self, Tensor());
  DP_CHECK(self.dtype() != kBool, DTypeError, "relu_: Boolean inputs not supported for relu");
  prologue("relu_", self, Tensor(), self.dtype());
  backend::unary_kernel(self.device().type, backend::UnaryOp::Relu, self, self);
  self.bump_version();
  if (autograd::needs_grad(self)) {
    record_inplace("ReluBackward0", {&self}, self,
                   [so = SavedVariable(self, true)](Node& n, const Tensor& g) { return variable_list{dp::where(dp::gt(so.unpack(&n), 0), g, 0)}; });
  }
  return self;
}

Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_operands("clamp_", self, Tensor());
  DP_CHECK(min.has_value() || max.has_value(), ValueError, "clamp_: At least one of 'min' or 'max' must not be None");
  ops::TypeState ts;
  ts.add(self);
  if (min) ts.add(*min);
  if (max) ts.add(*max);
  const DType ct = ts.result();
  DP_CHECK(ct != kBool, DTypeError, "clamp_: not implemented for bool tensors");
  prologue("clamp_", self, Tensor(), ct);
  const bool grad = autograd::needs_grad(self);
  Tensor mask;  // which elements were inside the bounds before the write
  if (grad) {
    mask = ops::new_output(self.sizes(), kBool, self.device());
    backend::clamp_mask_kernel(mask.device().type, mask, self, min, max);
  }
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::clamp_kernel(out.device().type, out, s, min, max); });
  self.bump_version();
  if (grad) {
    record_inplace("ClampBackward1", {&self}, self, [mask](Node&, const Tensor& g) { return variable_list{dp::where(mask, g, 0)}; });
  }
  return self;
}

Tensor& addcmul_(Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  check_operands("addcmul_", self, a);
  ops::check_binary("addcmul_", self, b);
  ops::TypeState ts;
  ts.add(self);
  ts.add(a);
  ts.add(b);
  const DType ct = ts.result();
  DP_CHECK(ct != kBool, DTypeError, "addcmul_: not implemented for bool tensors");
  ops::check_can_cast("addcmul_", ct, self.dtype());
  ops::check_inplace_shape("addcmul_", self, a);
  ops::check_inplace_shape("addcmul_", self, b);
  ops::check_no_internal_overlap("addcmul_", self);
  Tensor ac = operand(self, a, ct), bc = operand(self, b, ct);
  const bool grad = autograd::needs_grad(self, a, b);
  SavedVariable sa, sb;
  if (grad) {
    if (b.requires_grad()) sa = ops::save_input(a, &self);
    if (a.requires_grad()) sb = ops::save_input(b, &self);
  }
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::addcmul_kernel(out.device().type, out, s, ac, bc, value); });
  self.bump_version();
  if (grad) {
    record_inplace(
        "AddcmulBackward0", {&self, &a, &b}, self,
        [is = GradInfo(self), ia = GradInfo(a), ib = GradInfo(b), sa = std::move(sa), sb = std::move(sb), value](Node& n, const Tensor& g) {
          Tensor ga, gb;
          if (ia.needed) ga = ia.reduce(dp::mul(dp::mul(g, sb.unpack(&n)), value));
          if (ib.needed) gb = ib.reduce(dp::mul(dp::mul(g, sa.unpack(&n)), value));
          return variable_list{is.needed ? is.reduce(g) : Tensor(), ga, gb};
        });
  }
  return self;
}

Tensor& addcdiv_(Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  check_operands("addcdiv_", self, a);
  ops::check_binary("addcdiv_", self, b);
  DP_CHECK(!(is_integral(a.dtype(), true) && is_integral(b.dtype(), true)), DTypeError,
           "addcdiv_: Integer division with addcdiv is no longer supported; use floating point tensors");
  ops::TypeState ts;
  ts.add(self);
  ts.add(a);
  ts.add(b);
  const DType ct = ts.result();
  ops::check_can_cast("addcdiv_", ct, self.dtype());
  ops::check_inplace_shape("addcdiv_", self, a);
  ops::check_inplace_shape("addcdiv_", self, b);
  ops::check_no_internal_overlap("addcdiv_", self);
  Tensor ac = operand(self, a, ct), bc = operand(self, b, ct);
  const bool grad = autograd::needs_grad(self, a, b);
  SavedVariable sa, sb;
  if (grad) {
    if (b.requires_grad()) sa = ops::save_input(a, &self);
    if (a.requires_grad() || b.requires_grad()) sb = ops::save_input(b, &self);
  }
  ops::run_inplace(self, ct, [&](const Tensor& out, const Tensor& s) { backend::addcdiv_kernel(out.device().type, out, s, ac, bc, value); });
  self.bump_version();
  if (grad) {
    record_inplace(
        "AddcdivBackward0", {&self, &a, &b}, self,
        [is = GradInfo(self), ia = GradInfo(a), ib = GradInfo(b), sa = std::move(sa), sb = std::move(sb), value](Node& n, const Tensor& g) {
          Tensor ga, gb;
          Tensor bv = sb.unpack(&n);
          if (ia.needed) ga = ia.reduce(dp::div(dp::mul(g, value), bv));
          // -g * value * a / b^2
          if (ib.needed) gb = ib.reduce(dp::mul(dp::mul(g, ops::negate(value)), dp::div(dp::div(sa.unpack(&n), bv), bv)));
          return variable_list{is.needed ? is.reduce(g) : Tensor(), ga, gb};
        });
  }
  return self;
}

Tensor& lerp_(Tensor& self, const Tensor& end, const Scalar& weight) {
  check_operands("lerp_", self, end);
  DP_CHECK(self.dtype() == end.dtype(), DTypeError, "lerp_: expected dtype ", dtype_name(self.dtype()), " for `end` but got dtype ",
           dtype_name(end.dtype()));
  DP_CHECK(is_floating_point(self.dtype()), DTypeError, "lerp_: expected floating point tensors, got ", dtype_name(self.dtype()));
  prologue("lerp_", self, end, self.dtype());
  backend::lerp_kernel(self.device().type, self, self, ops::unaliased(self, end), weight);
  self.bump_version();
  if (autograd::needs_grad(self, end)) {
    record_inplace("LerpBackward0", {&self, &end}, self, [is = GradInfo(self), ie = GradInfo(end), weight](Node&, const Tensor& g) {
      const double w = weight.to_double();
      return variable_list{is.needed ? is.reduce(dp::mul(g, 1.0 - w)) : Tensor(), ie.needed ? ie.reduce(dp::mul(g, w)) : Tensor()};
    });
  }
  return self;
}

namespace {
// fill_ / zero_: the result no longer depends on self's old value (its gradient is zero).
Tensor& fill_impl(const char* op, const char* node, Tensor& self, const Scalar& value) {
  check_operands(op, self, Tensor());
  backend::fill_kernel(self.device().type, self, value);
  self.bump_version();
  if (autograd::needs_grad(self)) {
    record_inplace(node, {&self}, self,
                   [sizes = self.sizes(), dt = self.dtype()](Node&, const Tensor& g) { return variable_list{ops::zeros_of(sizes, dt, g.device())}; });
  }
  return self;
}
}  // namespace

Tensor& fill_(Tensor& self, const Scalar& value) { return fill_impl("fill_", "FillBackward2", self, value); }
Tensor& zero_(Tensor& self) { return fill_impl("zero_", "ZeroBackward0", self, Scalar(0)); }

Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking) {
  ops::check_defined("copy_", self, "self");
  ops::check_defined("copy_", src, "src");
  autograd::check_inplace(self, "copy_");
  ops::check_inplace_shape("copy_", self, src);
  ops::check_no_internal_overlap("copy_", self);
  // Every CPU device uses host memory: a copy between cpu:i and cpu:j is a plain strided copy (and
  // completes before returning, whatever non_blocking says).
  if (self.device() != src.device() && (!self.is_cpu() || !src.is_cpu())) {
    // Host <-> device or between devices (different memory, so no aliasing): the device's backend.
    backend::copy_across_kernel(backend::copy_device_type(self, src), self, src, non_blocking);
  } else if (!self.is_same(src)) {
    ops::copy_into(self, ops::unaliased(self, src));
  }
  self.bump_version();
  if (autograd::needs_grad(self, src)) {
    record_inplace("CopyBackwards", {&self, &src}, self,
                   [is = GradInfo(self), isrc = GradInfo(src), src_device = src.device()](Node&, const Tensor& g) {
                     Tensor gs, gsrc;
                     if (is.needed) gs = ops::zeros_of(is.sizes, is.dtype, g.device());
                     if (isrc.needed) {
                       gsrc = isrc.reduce(g);
                       if (gsrc.device() != src_device) gsrc = dp::to(gsrc, src_device, gsrc.dtype());
                     }
                     return variable_list{gs, gsrc};
                   });
  }
  return self;
}

}  // namespace dp
