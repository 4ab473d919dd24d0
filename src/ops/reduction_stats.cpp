// var, std, logsumexp and norm, with autograd. Backward formulas are written with dp ops; where
// they use the op's own result and the backward itself is being differentiated (create_graph), the
// result is recomputed from the saved input so that second derivatives see its dependence on it.
#include <cmath>
#include "backend/reduce_plan.h"
#include "backend/copy_kernels.h"
#include "backend/reduce_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/reduction.h"
#include "ops/common.h"
#include "ops/reduction_helpers.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

Shape dims_of(const std::vector<bool>& mask) {
  Shape r;
  for (size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) r.push_back(static_cast<int64_t>(d));
  return r;
}

// d var / d x applied to the keepdim-shaped gradient gk.
Tensor var_backward(const Tensor& gk, const Tensor& x, const std::vector<bool>& mask, int64_t correction) {
  const double n = static_cast<double>(backend::reduced_numel(x.sizes(), mask));
  Tensor centered = dp::sub(x, dp::mean(x, dims_of(mask), /*keepdim=*/true));
  return dp::mul(dp::mul(gk, centered), Scalar(2.0 / (n - static_cast<double>(correction))));
}

Tensor var_std(const Tensor& a, IntArrayRef dims, int64_t correction, bool keepdim, bool take_sqrt) {
  const char* name = take_sqrt ? "std" : "var";
  ops::check_defined(name, a);
  DP_CHECK(is_floating_point(a.dtype()), DTypeError, name, "(): std and var only support floating point and complex dtypes, got ",
           backend::torch_type_name(a.dtype()));
  std::vector<bool> mask = backend::make_dim_mask(dims, a.dim(), name);
  Tensor out = make_empty(backend::reduced_shape(a.sizes(), mask, keepdim), a.dtype(), a.device());
  backend::var_kernel(out.device().type, out, a, mask, keepdim, correction, take_sqrt);
  if (autograd::needs_grad(a)) {
    SavedVariable sx(a, false);
    Shape in_shape = a.sizes();
    if (!take_sqrt) {
      autograd::record("VarBackward0", {a}, {out}, [sx, mask, in_shape, keepdim, correction](variable_list&& g) {
        Tensor gk = ops::grad_to_keepdim(g[0], in_shape, mask, keepdim);
        return variable_list{var_backward(gk, sx.unpack(), mask, correction)};
      });
    } else {
      SavedVariable sy(out, true);
      autograd::record("StdBackward0", {a}, {out}, [sx, sy, mask, in_shape, keepdim, correction](variable_list&& g) {
        Tensor x = sx.unpack();
        Tensor y = GradMode::is_enabled() ? dp::std(x, dims_of(mask), correction, /*keepdim=*/true)
                                          : ops::grad_to_keepdim(sy.unpack(), in_shape, mask, keepdim);
        Tensor gk = ops::grad_to_keepdim(g[0], in_shape, mask, keepdim);
        // d std = d var / (2 std); zero where std is 0, as PyTorch.
        Tensor gvar = dp::where(dp::ne(y, Scalar(0)), dp::div(gk, dp::mul(y, Scalar(2))), Scalar(0.0));
        return variable_list{var_backward(gvar, x, mask, correction)};
      });
    }
  }
  return out;
}

}  // namespace

Tensor var(const Tensor& a, IntArrayRef dims, int64_t correction, bool keepdim) { return var_std(a, dims, correction, keepdim, false); }

Tensor std(const Tensor& a, IntArrayRef dims, int64_t correction, bool keepdim) { return var_std(a, dims, correction, keepdim, true); }

Tensor logsumexp(const Tensor& a, IntArrayRef dims, bool keepdim) {
  if (autocast::detail::Cast ac{autocast::detail::Op::logsumexp, {&a}}) return ac([&] { return dp::logsumexp(ac[0], dims, keepdim); });
  ops::check_defined("logsumexp", a);
  // Integer inputs give the default float type (PyTorch 1.13 promotes them).
  Tensor x = is_floating_point(a.dtype()) ? a : backend::convert_nograd(a, default_float_dtype());
  std::vector<bool> mask = backend::make_dim_mask(dims, x.dim(), "logsumexp");
  Tensor out = make_empty(backend::reduced_shape(x.sizes(), mask, keepdim), x.dtype(), x.device());
  backend::logsumexp_kernel(out.device().type, out, x, mask, keepdim);
  if (autograd::needs_grad(x)) {
    SavedVariable sx(x, false), sy(out, true);
    Shape in_shape = x.sizes();
    autograd::record("LogsumexpBackward0", {x}, {out}, [sx, sy, mask, in_shape, keepdim](variable_list&& g) {
      Tensor xs = sx.unpack();
      Tensor y =
          GradMode::is_enabled() ? dp::logsumexp(xs, dims_of(mask), /*keepdim=*/true) : ops::grad_to_keepdim(sy.unpack(), in_shape, mask, keepdim);
      Tensor gk = ops::grad_to_keepdim(g[0], in_shape, mask, keepdim);
      return variable_list{dp::mul(gk, dp::exp(dp::sub(xs, y)))};
    });
  }
  return out;
}

Tensor norm(const Tensor& a, double p) {
  if (autocast::detail::Cast ac{autocast::detail::Op::norm, {&a}}) return ac([&] { return dp::norm(ac[0], p); });
  ops::check_defined("norm", a);
  DP_CHECK(is_floating_point(a.dtype()), DTypeError, "norm(): input dtype should be either floating point or complex. Got ",
           backend::torch_type_name(a.dtype()), " instead.");
  DP_CHECK(!std::isnan(p), ValueError, "norm(): the order p must not be nan");
  Tensor out = make_empty({}, a.dtype(), a.device());
  if (a.numel() == 0)
    backend::fill_kernel(out.device().type, out, Scalar(0.0));  // every norm of nothing is 0, as torch.norm
  else
    backend::norm_kernel(out.device().type, out, a, p);
  if (autograd::needs_grad(a)) {
    SavedVariable sx(a, false), sy(out, true);
    autograd::record("NormBackward1", {a}, {out}, [sx, sy, p](variable_list&& g) {
      Tensor x = sx.unpack();
      const Tensor& gr = g[0];
      if (p == 0.0) return variable_list{dp::zeros_like(x)};
      if (p == 1.0) return variable_list{dp::mul(dp::sign(x), gr)};
      Tensor y = GradMode::is_enabled() ? dp::norm(x, p) : sy.unpack();
      if (std::isinf(p)) {
        // Split evenly among the elements whose magnitude is the norm.
        Tensor hit = dp::eq(dp::abs(x), y);
        return variable_list{dp::mul(dp::sign(x), dp::where(hit, dp::div(gr, dp::sum(hit)), Scalar(0.0)))};
      }
      Tensor nonzero = dp::ne(y, Scalar(0));
      if (p == 2.0) return variable_list{dp::mul(x, dp::where(nonzero, dp::div(gr, y), Scalar(0.0)))};
      // x |x|^(p-2) g / norm^(p-1)
      Tensor scale = dp::where(nonzero, dp::div(gr, dp::pow(y, Scalar(p - 1.0))), Scalar(0.0));
      return variable_list{dp::mul(dp::mul(x, dp::pow(dp::abs(x), Scalar(p - 2.0))), scale)};
    });
  }
  return out;
}

}  // namespace dp
