// layer_norm: one fused forward kernel (per-row mean and rstd, kept in float64 for the backward)
// and one fused backward kernel (grad input, weight and bias together). As in PyTorch the
// backward saves the input, weight, mean and rstd. Under create_graph the backward is the same
// formula in dp ops, recomputing the statistics from the input, so it differentiates again.
#include "dp/ops/normalization.h"

#include <vector>
#include "backend/capabilities.h"
#include "backend/norm_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "ops/common.h"
#include "ops/reduction_helpers.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

// float16/bfloat16 only on CUDA devices (src/backend/cuda/norm_pool.cu computes them in float32).
void check_norm_dtype(const char* op, const Tensor& t, const char* what) {
  DP_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64 || backend::half_nn_dtype(t.device(), t.dtype()), DTypeError, op, ": expected ", what,
           " of dtype float32 or float64 (float16 and bfloat16 on CUDA devices), got ", t.describe());
}

void check_layer_norm_inputs(const Tensor& input, IntArrayRef shape, const Tensor& weight, const Tensor& bias) {
  const char* op = "layer_norm";
  ops::check_defined(op, input);
  if (!backend::capabilities(input.device()).kernels) ops::check_cpu_tensor(op, input);
  ops::check_same_device(op, {&input, &weight, &bias});
  DP_CHECK(
      !shape.empty(), ShapeError,
      "layer_norm: Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got normalized_shape = []");
  DP_CHECK(!weight.defined() || IntArrayRef(weight.sizes()).equals(shape), ShapeError,
           "layer_norm: Expected weight to be of same shape as normalized_shape, but got weight of shape ", weight.size_str(),
           " and normalized_shape = ", shape_str(shape));
  DP_CHECK(!bias.defined() || IntArrayRef(bias.sizes()).equals(shape), ShapeError,
           "layer_norm: Expected bias to be of same shape as normalized_shape, but got bias of shape ", bias.size_str(),
           " and normalized_shape = ", shape_str(shape));
  const int64_t nd = static_cast<int64_t>(shape.size());
  bool ok = input.dim() >= nd;
  for (int64_t i = 0; ok && i < nd; ++i) ok = input.size(input.dim() - nd + i) == shape[i];
  if (!ok) {
    std::string expected = "[*";
    for (int64_t s : shape) expected += ", " + std::to_string(s);
    expected += "]";
    throw ShapeError(detail::str("layer_norm: Given normalized_shape=", shape_str(shape), ", expected input with shape ", expected,
                                 ", but got input of size", input.size_str()));
  }
  check_norm_dtype(op, input, "input");
  for (const Tensor* t : {&weight, &bias}) {
    DP_CHECK(!t->defined() || t->dtype() == input.dtype(), DTypeError, "layer_norm: expected ", t == &weight ? "weight" : "bias",
             " to have the input's dtype ", dtype_name(input.dtype()), ", got ", t->describe());
  }
}

// The backward in dp ops (differentiable): x, w as saved, g the incoming gradient.
variable_list layer_norm_backward_ops(const Tensor& g, const Tensor& x, const Tensor& w, const Shape& shape, double eps, bool gx, bool gw, bool gb) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - nd; d < x.dim(); ++d) dims.push_back(d);
  Tensor mu = dp::mean(x, dims, true);
  Tensor rs = dp::rsqrt(dp::add(dp::var(x, dims, 0, true), eps));
  Tensor xhat = dp::mul(dp::sub(x, mu), rs);
  Tensor dx, dw, db;
  if (gx) {
    Tensor gwt = w.defined() ? dp::mul(g, w) : g;
    Tensor inner = dp::sub(dp::sub(gwt, dp::mean(gwt, dims, true)), dp::mul(xhat, dp::mean(dp::mul(gwt, xhat), dims, true)));
    dx = dp::mul(rs, inner);
  }
  if (gw) dw = dp::sum_to(dp::mul(g, xhat), shape);
  if (gb) db = dp::sum_to(g, shape);
  return {dx, dw, db};
}

}  // namespace

Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  if (autocast::detail::Cast ac{autocast::detail::Op::layer_norm, {&input, &weight, &bias}})
    return ac([&] { return dp::layer_norm(ac[0], normalized_shape, ac[1], ac[2], eps); });
  check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const Shape shape = normalized_shape.vec();
  const int64_t N = numel_of(normalized_shape);
  const int64_t M = N > 0 ? input.numel() / N : numel_of(IntArrayRef(input.sizes().data(), input.sizes().size() - shape.size()));
  Tensor x = backend::contiguous_nograd(input);
  Tensor w = weight.defined() ? backend::contiguous_nograd(weight) : Tensor();
  Tensor b = bias.defined() ? backend::contiguous_nograd(bias) : Tensor();
  Tensor out = make_empty(input.sizes(), input.dtype(), input.device());
  Tensor mean = make_empty({M}, kFloat64, input.device());
  Tensor rstd = make_empty({M}, kFloat64, input.device());
  backend::layer_norm_kernel(x.device().type, x, w, b, M, N, eps, out, mean, rstd);

  const bool gx = autograd::needs_grad(input), gw = autograd::needs_grad(weight), gb = autograd::needs_grad(bias);
  if (gx || gw || gb) {
    SavedVariable sx(input, false);
    SavedVariable sw = weight.defined() ? SavedVariable(weight, false) : SavedVariable();
    autograd::record("NativeLayerNormBackward0", {input, weight, bias}, {out},
                     [sx, sw, mean, rstd, shape, M, N, eps, gx, gw, gb](variable_list&& grads) {
                       const Tensor& g = grads[0];
                       Tensor x = sx.unpack();
                       Tensor w = sw.defined() ? sw.unpack() : Tensor();
                       if (GradMode::is_enabled()) return layer_norm_backward_ops(g, x, w, shape, eps, gx, gw, gb);
                       Tensor dy = backend::contiguous_nograd(backend::convert_nograd(g, x.dtype()));
                       Tensor dx = gx ? make_empty(x.sizes(), x.dtype(), x.device()) : Tensor();
                       Tensor dw = gw ? make_empty(shape, x.dtype(), x.device()) : Tensor();
                       Tensor db = gb ? make_empty(shape, x.dtype(), x.device()) : Tensor();
                       backend::layer_norm_backward_kernel((backend::contiguous_nograd(x)).device().type, dy, backend::contiguous_nograd(x), mean,
                                                           rstd, w.defined() ? backend::contiguous_nograd(w) : Tensor(), M, N, dx, dw, db);
                       return variable_list{dx, dw, db};
                     });
  }
  return out;
}

}  // namespace dp
