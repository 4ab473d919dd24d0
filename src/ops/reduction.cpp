// sum, mean and sum_to, with autograd.
#include <vector>
#include "backend/reduce_kernels.h"
#include "backend/reduce_plan.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/common.h"
#include "ops/reduction_helpers.h"
#include "amp/autocast_ops.h"

namespace dp {

namespace ops {

Tensor grad_to_keepdim(const Tensor& g, IntArrayRef in_shape, const std::vector<bool>& mask, bool keepdim) {
  if (keepdim || in_shape.empty()) return g;
  Shape keep = backend::reduced_shape(in_shape, mask, true);
  if (g.sizes() == keep) return g;
  return dp::reshape(g, keep);
}

void check_cpu_tensor(const char* op, const Tensor& t) {
  DP_CHECK(t.is_cpu(), NotImplementedError, op, ": tensors on ", t.device().str(), " are not supported yet (got ", t.describe(), ")");
}

}  // namespace ops

namespace {

// Sums x over the dims in mask. The result has shape `out_shape` (the reduction's shape, with or
// without kept dims, or for sum_to the target shape, which has the same elements in the same order).
Tensor sum_impl(const Tensor& x, const std::vector<bool>& mask, bool keepdim, const Shape& out_shape, const char* node) {
  const DType out_dt = is_floating_point(x.dtype()) ? x.dtype() : kInt64;
  Tensor out = make_empty(out_shape, out_dt, x.device());
  Shape kernel_shape = backend::reduced_shape(x.sizes(), mask, keepdim);
  Tensor kernel_out = kernel_shape == out_shape ? out : backend::restride_nograd(out, kernel_shape, contiguous_strides(kernel_shape));
  backend::sum_kernel(kernel_out.device().type, kernel_out, x, mask, keepdim);
  if (autograd::needs_grad(x)) {
    Shape in_shape = x.sizes();
    autograd::record(node, {x}, {out}, [in_shape, mask, keepdim, out_shape, kernel_shape](autograd::variable_list&& g) {
      Tensor gk = out_shape == kernel_shape ? ops::grad_to_keepdim(g[0], in_shape, mask, keepdim) : g[0];
      return autograd::variable_list{dp::expand(gk, in_shape)};
    });
  }
  return out;
}

Tensor sum_dims(const Tensor& a, IntArrayRef dims, bool keepdim, std::optional<DType> dtype, const char* node) {
  ops::check_defined("sum", a);
  Tensor x = (dtype && *dtype != a.dtype()) ? dp::to(a, a.device(), *dtype) : a;
  std::vector<bool> mask = backend::make_dim_mask(dims, x.dim(), "sum");
  return sum_impl(x, mask, keepdim, backend::reduced_shape(x.sizes(), mask, keepdim), node);
}

Tensor mean_dims(const Tensor& a, IntArrayRef dims, bool keepdim, const char* node) {
  ops::check_defined("mean", a);
  DP_CHECK(is_floating_point(a.dtype()), DTypeError,
           "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: ",
           backend::torch_type_name(a.dtype()));
  std::vector<bool> mask = backend::make_dim_mask(dims, a.dim(), "mean");
  Tensor out = make_empty(backend::reduced_shape(a.sizes(), mask, keepdim), a.dtype(), a.device());
  backend::mean_kernel(out.device().type, out, a, mask, keepdim);
  if (autograd::needs_grad(a)) {
    Shape in_shape = a.sizes();
    const int64_t n = backend::reduced_numel(in_shape, mask);
    autograd::record(node, {a}, {out}, [in_shape, mask, keepdim, n](autograd::variable_list&& g) {
      Tensor gk = ops::grad_to_keepdim(g[0], in_shape, mask, keepdim);
      return autograd::variable_list{dp::expand(dp::div(gk, Scalar(static_cast<double>(n))), in_shape)};
    });
  }
  return out;
}

// sum_to's common case in backward formulas (a bias's gradient: [rows, n] -> [n]) without the
// general reduction's plan, masks and graph: a contiguous float32/float64 tensor that needs no
// gradient, summed over a prefix of its dims (the target keeps every later dim as it is), by the
// backend's sum_rows_stub where it has one (the CPU: on a CUDA device the general reduction already
// handles this shape with one kernel).
// Returns an undefined tensor when the case does not apply (or the shapes are invalid: the general
// path reports that).
Tensor sum_leading_dims(const Tensor& a, IntArrayRef shape, int64_t lead) {
  if (autograd::needs_grad(a) || !a.is_contiguous() || (a.dtype() != kFloat32 && a.dtype() != kFloat64) ||
      !backend::sum_rows_kernel.has(a.device().type))
    return Tensor();
  const int64_t nd = a.dim();
  int64_t first_kept = nd;  // dims [first_kept, nd) are kept as they are
  while (first_kept > lead && shape[first_kept - 1 - lead] == a.size(first_kept - 1)) --first_kept;
  for (int64_t d = lead; d < first_kept; ++d)
    if (shape[d - lead] != 1) return Tensor();
  int64_t rows = 1, inner = 1;
  for (int64_t d = 0; d < first_kept; ++d) rows *= a.size(d);
  for (int64_t d = first_kept; d < nd; ++d) inner *= a.size(d);
  Tensor out = make_empty(shape, a.dtype(), a.device());
  if (inner == 0) return out;
  backend::sum_rows_kernel(a.device().type, out, a, rows, inner);
  return out;
}

}  // namespace

Tensor sum(const Tensor& a, std::optional<DType> dtype) {
  // An explicit dtype is kept under autocast (PyTorch's fp32_set_opt_dtype policy).
  if (!dtype)
    if (autocast::detail::Cast ac{autocast::detail::Op::sum, {&a}}) return ac([&] { return dp::sum(ac[0]); });
  return sum_dims(a, {}, false, dtype, "SumBackward0");
}

Tensor sum(const Tensor& a, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  if (!dtype)
    if (autocast::detail::Cast ac{autocast::detail::Op::sum, {&a}}) return ac([&] { return dp::sum(ac[0], dims, keepdim); });
  return sum_dims(a, dims, keepdim, dtype, "SumBackward1");
}

Tensor mean(const Tensor& a) { return mean_dims(a, {}, false, "MeanBackward0"); }

Tensor mean(const Tensor& a, IntArrayRef dims, bool keepdim) { return mean_dims(a, dims, keepdim, "MeanBackward1"); }

Tensor sum_to(const Tensor& a, IntArrayRef shape) {
  ops::check_defined("sum_to", a);
  if (a.sizes() == shape.vec()) return a;
  const int64_t nd = a.dim();
  const int64_t lead = nd - static_cast<int64_t>(shape.size());
  DP_CHECK(lead >= 0, ShapeError, "sum_to: a tensor of size ", a.size_str(), " cannot be summed to size ", shape_str(shape),
           " (the target has more dims)");
  if (Tensor out = sum_leading_dims(a, shape, lead); out.defined()) return out;
  std::vector<bool> mask(static_cast<size_t>(nd), false);
  for (int64_t d = 0; d < lead; ++d) mask[d] = true;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t have = a.sizes()[lead + i], want = shape[i];
    if (want == have) continue;
    DP_CHECK(want == 1, ShapeError, "sum_to: a tensor of size ", a.size_str(), " cannot be summed to size ", shape_str(shape), " (size ", have,
             " at dim ", lead + i, " is neither ", want, " nor reduced to 1)");
    mask[lead + i] = true;
  }
  return sum_impl(a, mask, /*keepdim=*/true, shape.vec(), "SumBackward1");
}

}  // namespace dp
