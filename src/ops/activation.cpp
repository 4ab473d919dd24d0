// Activations: relu, sigmoid, tanh, gelu (erf and tanh forms), silu, softplus.
//
// Backward: a plain backward (grad mode off, the usual case) runs one fused kernel
// g * f'(x); a differentiable backward (create_graph) writes the same formula with dp ops so it
// can be differentiated again.
#include <cmath>
#include <string>
#include "ops/elementwise_common.h"
#include "backend/elementwise_kernels.h"
#include "amp/autocast_ops.h"

namespace dp {

using autograd::Node;
using autograd::variable_list;
using autograd::SavedVariable;
using backend::ActGrad;
using backend::UnaryOp;
using ops::record;
using ops::unpack_output;

namespace {

// The fused first-order backward applies when nothing needs differentiating again and the
// gradient has the dtype the kernel expects.
bool use_fused(const Tensor& g, const Tensor& xy) { return !GradMode::is_enabled() && g.dtype() == xy.dtype() && is_floating_point(g.dtype()); }

Tensor fused_backward(ActGrad op, const Tensor& g, const Tensor& xy) {
  Tensor out = ops::new_output(xy.sizes(), xy.dtype(), xy.device());
  backend::activation_backward_kernel(out.device().type, op, out, g, xy);
  return out;
}

Tensor activation(const char* op, UnaryOp k, const Tensor& a, bool floating_only) {
  ops::check_input(op, a);
  DType ct = a.dtype();
  if (floating_only) {
    DP_CHECK(is_floating_point(ct), DTypeError, op, ": not implemented for ", dtype_name(ct), " tensors (floating point only)");
  } else {
    ct = ops::to_float_dtype(ct);
  }
  Tensor out = ops::new_output(a.sizes(), ct, a.device());
  backend::unary_kernel(out.device().type, k, out, ops::to_dtype(a, ct));
  return out;
}

// Phi(x), the standard normal CDF, differentiable (d/dx = phi(x), written with dp ops) so that
// gelu's derivative Phi(x) + x phi(x) can be differentiated again.
Tensor phi(const Tensor& x) { return dp::mul(dp::exp(dp::mul(dp::square(x), -0.5)), backend::kInvSqrt2Pi<double>); }

Tensor normal_cdf(const Tensor& x) {
  Tensor out = ops::new_output(x.sizes(), x.dtype(), x.device());
  backend::unary_kernel(out.device().type, backend::UnaryOp::NormalCdf, out, x);
  if (autograd::needs_grad(x)) {
    record("NormalCdfBackward0", {&x}, out,
           [sx = SavedVariable(x, false)](Node& n, const Tensor& g) { return variable_list{dp::mul(g, phi(sx.unpack(&n)))}; });
  }
  return out;
}

}  // namespace

Tensor relu(const Tensor& a) {
  ops::check_input("relu", a);
  DP_CHECK(a.dtype() != kBool, DTypeError, "relu: Boolean inputs not supported for relu");
  Tensor out = ops::new_output(a.sizes(), a.dtype(), a.device());
  backend::unary_kernel(out.device().type, UnaryOp::Relu, out, a);
  if (autograd::needs_grad(a)) {
    record("ReluBackward0", {&a}, out, [so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      Tensor y = so.unpack(&n);
      if (use_fused(g, y)) return variable_list{fused_backward(ActGrad::ReluFromOut, g, y)};
      return variable_list{dp::where(dp::gt(y, 0), g, 0)};  // gradient 0 at 0, as PyTorch
    });
  }
  return out;
}

Tensor sigmoid(const Tensor& a) {
  Tensor out = activation("sigmoid", UnaryOp::Sigmoid, a, false);
  if (autograd::needs_grad(a)) {
    record("SigmoidBackward0", {&a}, out, [so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      Tensor y = unpack_output(so, n);
      if (use_fused(g, y)) return variable_list{fused_backward(ActGrad::SigmoidFromOut, g, y)};
      return variable_list{dp::mul(g, dp::mul(y, dp::rsub(y, 1)))};
    });
  }
  return out;
}

Tensor tanh(const Tensor& a) {
  Tensor out = activation("tanh", UnaryOp::Tanh, a, false);
  if (autograd::needs_grad(a)) {
    record("TanhBackward0", {&a}, out, [so = SavedVariable(out, true)](Node& n, const Tensor& g) {
      Tensor y = unpack_output(so, n);
      if (use_fused(g, y)) return variable_list{fused_backward(ActGrad::TanhFromOut, g, y)};
      return variable_list{dp::mul(g, dp::rsub(dp::mul(y, y), 1))};
    });
  }
  return out;
}

Tensor gelu(const Tensor& a, const std::string& approximate) {
  DP_CHECK(approximate == "none" || approximate == "tanh", ValueError, "gelu: approximate argument must be either none or tanh, got '", approximate,
           "'");
  const bool tanh_form = approximate == "tanh";
  Tensor out = activation("gelu", tanh_form ? UnaryOp::GeluTanh : UnaryOp::Gelu, a, true);
  if (autograd::needs_grad(a)) {
    record("GeluBackward0", {&a}, out, [sa = SavedVariable(a, false), tanh_form](Node& n, const Tensor& g) {
      Tensor x = sa.unpack(&n);
      if (use_fused(g, x)) return variable_list{fused_backward(tanh_form ? ActGrad::GeluTanh : ActGrad::Gelu, g, x)};
      Tensor d;
      if (!tanh_form) {
        d = dp::add(normal_cdf(x), dp::mul(x, phi(x)));  // Phi(x) + x phi(x)
      } else {
        const double k = backend::kSqrt2OverPi<double>, c = backend::kGeluC<double>;
        Tensor x2 = dp::square(x);
        Tensor t = dp::tanh(dp::mul(dp::add(x, dp::mul(dp::mul(x2, x), c)), k));
        Tensor dinner = dp::mul(dp::add(dp::mul(x2, 3.0 * c), 1), k);
        // 0.5 (1 + t) + 0.5 x (1 - t^2) dinner
        d = dp::add(dp::mul(dp::add(t, 1), 0.5), dp::mul(dp::mul(x, dp::rsub(dp::square(t), 1)), dp::mul(dinner, 0.5)));
      }
      return variable_list{dp::mul(g, d)};
    });
  }
  return out;
}

Tensor silu(const Tensor& a) {
  Tensor out = activation("silu", UnaryOp::Silu, a, true);
  if (autograd::needs_grad(a)) {
    record("SiluBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) {
      Tensor x = sa.unpack(&n);
      if (use_fused(g, x)) return variable_list{fused_backward(ActGrad::Silu, g, x)};
      Tensor s = dp::sigmoid(x);
      return variable_list{dp::mul(g, dp::mul(s, dp::add(dp::mul(x, dp::rsub(s, 1)), 1)))};
    });
  }
  return out;
}

Tensor softplus(const Tensor& a) {
  if (autocast::detail::Cast ac{autocast::detail::Op::softplus, {&a}}) return ac([&] { return dp::softplus(ac[0]); });
  Tensor out = activation("softplus", UnaryOp::Softplus, a, true);
  if (autograd::needs_grad(a)) {
    record("SoftplusBackward0", {&a}, out, [sa = SavedVariable(a, false)](Node& n, const Tensor& g) {
      Tensor x = sa.unpack(&n);
      if (use_fused(g, x)) return variable_list{fused_backward(ActGrad::Softplus, g, x)};
      return variable_list{dp::where(dp::gt(x, 20), g, dp::mul(g, dp::sigmoid(x)))};
    });
  }
  return out;
}

}  // namespace dp
