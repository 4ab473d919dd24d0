// max / min (over everything, or along a dim with indices), amax, argmax / argmin, with autograd.
#include "backend/reduce_plan.h"
#include "backend/reduce_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/reduction.h"
#include "ops/common.h"
#include "ops/reduction_helpers.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

// Gradient of an all-element max/min: split evenly among the elements equal to the result (the NaN
// elements when the result is NaN), as PyTorch's evenly_distribute_backward.
Tensor evenly_distribute_backward(const Tensor& g, const Tensor& x, const Tensor& value) {
  const double v = value.item<double>();
  Tensor mask = v != v ? dp::ne(x, x) : dp::eq(x, value);
  Tensor count = dp::sum(mask);
  return dp::where(mask, dp::div(g, count), Scalar(0.0));
}

// Gradient of a value picked along `dim` at `indices`: g lands on the picked positions.
Tensor value_selecting_backward(const Tensor& g, int64_t dim, const Tensor& indices, const Shape& in_shape, bool keepdim) {
  if (in_shape.empty()) return g;
  std::vector<bool> mask(in_shape.size(), false);
  mask[dim] = true;
  Tensor gk = ops::grad_to_keepdim(g, in_shape, mask, keepdim);
  Tensor ik = ops::grad_to_keepdim(indices, in_shape, mask, keepdim);
  return dp::scatter_add(dp::zeros(in_shape, TensorOptions().dtype(g.dtype()).device(g.device())), dim, ik, gk);
}

Tensor max_all(const Tensor& a, bool is_max) {
  const char* name = is_max ? "max" : "min";
  ops::check_defined(name, a);
  DP_CHECK(a.numel() > 0, IndexError, name,
           "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  std::vector<bool> mask(static_cast<size_t>(a.dim()), true);
  Tensor out = make_empty({}, a.dtype(), a.device());
  backend::minmax_kernel(out.device().type, out, a, mask, /*keepdim=*/false, is_max);
  if (autograd::needs_grad(a)) {
    SavedVariable sx(a, false), sy(out, true);
    autograd::record(is_max ? "MaxBackward1" : "MinBackward1", {a}, {out},
                     [sx, sy](variable_list&& g) { return variable_list{evenly_distribute_backward(g[0], sx.unpack(), sy.unpack())}; });
  }
  return out;
}

std::pair<Tensor, Tensor> max_dim(const Tensor& a, int64_t dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  ops::check_defined(name, a);
  const int64_t d = wrap_dim(dim, a.dim(), name);
  std::vector<bool> mask(static_cast<size_t>(a.dim()), false);
  if (a.dim() > 0) {
    DP_CHECK(a.sizes()[d] != 0, IndexError, name, "(): Expected reduction dim ", d, " to have non-zero size.");
    mask[d] = true;
  }
  Shape out_shape = backend::reduced_shape(a.sizes(), mask, keepdim);
  Tensor values = make_empty(out_shape, a.dtype(), a.device());
  Tensor indices = make_empty(out_shape, kInt64, a.device());
  backend::minmax_index_kernel((values.defined() ? values : indices).device().type, values, indices, a, d, keepdim, is_max);
  if (autograd::needs_grad(a)) {
    SavedVariable si(indices, false);
    Shape in_shape = a.sizes();
    autograd::record(is_max ? "MaxBackward0" : "MinBackward0", {a}, {values}, [si, d, in_shape, keepdim](variable_list&& g) {
      return variable_list{value_selecting_backward(g[0], d, si.unpack(), in_shape, keepdim)};
    });
  }
  return {values, indices};
}

Tensor arg_extreme(const Tensor& a, std::optional<int64_t> dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "argmax" : "argmin";
  ops::check_defined(name, a);
  DP_CHECK(a.dtype() != kBool, DTypeError, name, "(): \"", name, "_cpu\" not implemented for 'Bool'");
  if (!dim) {
    DP_CHECK(a.numel() > 0, IndexError, name, "(): Expected reduction dim to be specified for input.numel() == 0.");
    // The index into the flattened (row-major) tensor.
    Tensor flat = backend::contiguous_nograd(a);
    flat = backend::restride_nograd(flat, {a.numel()}, {1});
    Shape out_shape = keepdim ? Shape(static_cast<size_t>(a.dim()), 1) : Shape{};
    Tensor out = make_empty(out_shape, kInt64, a.device());
    backend::minmax_index_kernel((Tensor().defined() ? Tensor() : (backend::restride_nograd(out, {}, {}))).device().type, Tensor(),
                                 backend::restride_nograd(out, {}, {}), flat, 0, false, is_max);
    return out;
  }
  const int64_t d = wrap_dim(*dim, a.dim(), name);
  std::vector<bool> mask(static_cast<size_t>(a.dim()), false);
  if (a.dim() > 0) {
    DP_CHECK(a.sizes()[d] != 0, IndexError, name, "(): Expected reduction dim ", d, " to have non-zero size.");
    mask[d] = true;
  }
  Tensor out = make_empty(backend::reduced_shape(a.sizes(), mask, keepdim), kInt64, a.device());
  backend::minmax_index_kernel((Tensor().defined() ? Tensor() : out).device().type, Tensor(), out, a, d, keepdim, is_max);
  return out;
}

}  // namespace

Tensor max(const Tensor& a) { return max_all(a, true); }
Tensor min(const Tensor& a) { return max_all(a, false); }
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) { return max_dim(a, dim, keepdim, true); }
std::pair<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim) { return max_dim(a, dim, keepdim, false); }
Tensor argmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) { return arg_extreme(a, dim, keepdim, true); }
Tensor argmin(const Tensor& a, std::optional<int64_t> dim, bool keepdim) { return arg_extreme(a, dim, keepdim, false); }

Tensor amax(const Tensor& a, IntArrayRef dims, bool keepdim) {
  ops::check_defined("amax", a);
  std::vector<bool> mask = backend::make_dim_mask(dims, a.dim(), "amax");
  if (a.numel() == 0) {
    DP_CHECK(!dims.empty(), IndexError,
             "amax(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
    for (int64_t d = 0; d < a.dim(); ++d)
      DP_CHECK(!mask[d] || a.sizes()[d] != 0, IndexError, "amax(): Expected reduction dim ", d, " to have non-zero size.");
  }
  Tensor out = make_empty(backend::reduced_shape(a.sizes(), mask, keepdim), a.dtype(), a.device());
  backend::minmax_kernel(out.device().type, out, a, mask, keepdim, /*is_max=*/true);
  if (autograd::needs_grad(a)) {
    SavedVariable sx(a, false), sy(out, true);
    Shape in_shape = a.sizes();
    autograd::record("AmaxBackward0", {a}, {out}, [sx, sy, mask, in_shape, keepdim](variable_list&& g) {
      // Split evenly among the elements equal to the maximum of their slice.
      Tensor x = sx.unpack();
      Tensor yk = ops::grad_to_keepdim(sy.unpack(), in_shape, mask, keepdim);
      Tensor gk = ops::grad_to_keepdim(g[0], in_shape, mask, keepdim);
      Tensor hit = dp::eq(x, yk);
      Shape rdims;
      for (size_t d = 0; d < mask.size(); ++d)
        if (mask[d]) rdims.push_back(static_cast<int64_t>(d));
      Tensor count = dp::sum(hit, rdims, /*keepdim=*/true);  // rdims empty only for a 0-dim input: all
      return variable_list{dp::where(hit, dp::div(gk, count), Scalar(0.0))};
    });
  }
  return out;
}

}  // namespace dp
