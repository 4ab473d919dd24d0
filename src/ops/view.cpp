// View operations: outputs share the input's storage (and so its version counter); nothing is
// copied. Sizes, strides and storage offsets follow PyTorch exactly. Each op that records history
// marks its outputs as views (autograd::mark_view).
//
// Backward formulas are written with dp ops so that they are differentiable again:
//   view / reshape / squeeze / unsqueeze      reshape (or squeeze) the gradient back
//   transpose / permute                       the inverse permutation
//   expand                                    sum_to the input's shape
//   slice / narrow / select                   zeros of the input's shape with the gradient copied
//                                             into the same view of them (view_scatter below)
//   as_strided                                scatter-add through the output geometry, gather
//                                             through the input geometry, dividing by how often
//                                             an overlapping input uses a position (restride)
//   split / chunk / split_with_sizes          one node for all pieces: cat of the pieces' grads
#include <algorithm>
#include <functional>
#include "dp/core/pooled.h"
#include "backend/copy_kernels.h"
#include "backend/dispatch.h"
#include "dp/autograd/function.h"
#include "backend/tensor_nograd.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/common.h"

namespace dp {

namespace {

using autograd::variable_list;

// A new tensor over t's storage with the given geometry (no history).
Tensor alias_with(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}

// Gives a view `out` of `in` its history (node `name`) when `in` requires grad, and marks it a view.
template <typename F>
Tensor view_history(const Tensor& in, Tensor out, const char* name, F&& backward) {
  if (autograd::needs_grad(in)) {
    autograd::record(name, {in}, {out}, autograd::FunctionNode::BackwardFn(std::forward<F>(backward)));
    autograd::mark_view(out);
  }
  return out;
}

// The gradient of a view op whose output is view_fn(input): zeros of the input's shape with g
// copied into view_fn(zeros). Linear in g; its adjoint is view_fn itself, which is what its own
// backward applies (so double backward works).
Tensor view_scatter(const Tensor& g, const Shape& in_sizes, std::function<Tensor(const Tensor&)> view_fn, const char* name) {
  Tensor z = zeros(in_sizes, options_of(g));
  {
    NoGradGuard no_grad;
    backend::copy_kernel(backend::copy_device_type((view_fn(z)), g), view_fn(z), g);
  }
  if (autograd::needs_grad(g)) {
    autograd::record(name, {g}, {z}, [view_fn](variable_list&& gg) { return variable_list{view_fn(gg[0])}; });
  }
  return z;
}

// Geometry of a strided tensor inside its storage (in elements).
struct Geometry {
  Shape sizes;
  Shape strides;
  int64_t offset = 0;
};

// Smallest and largest storage position a geometry touches (numel > 0).
std::pair<int64_t, int64_t> extent_of(const Geometry& g) {
  int64_t lo = g.offset, hi = g.offset;
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    if (g.sizes[d] == 0) return {g.offset, g.offset};
    const int64_t span = (g.sizes[d] - 1) * g.strides[d];
    if (span < 0)
      lo += span;
    else
      hi += span;
  }
  return {lo, hi};
}

// Calls f(i, pos) for every element of a geometry: i its row-major index, pos its storage
// position relative to `base`.
template <typename F>
void for_each_position(const Geometry& g, int64_t base, F&& f) {
  const int64_t n = numel_of(g.sizes);
  const size_t nd = g.sizes.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t pos = g.offset - base;
  for (int64_t i = 0; i < n; ++i) {
    f(i, pos);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < g.sizes[d]) {
        pos += g.strides[d];
        break;
      }
      pos -= g.strides[d] * (g.sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

// How many elements of a geometry use each storage position in [base, base + len); empty when
// no position is used twice.
std::vector<int64_t> overlap_counts(const Geometry& g, int64_t base, int64_t len) {
  std::vector<int64_t> count(static_cast<size_t>(len), 0);
  bool overlapping = false;
  for_each_position(g, base, [&](int64_t, int64_t pos) { overlapping |= ++count[pos] > 1; });
  if (!overlapping) count.clear();
  return count;
}

// Storage positions (relative to base) of a geometry's elements in row-major order, as an int64
// index on `device`, and, with `count` (overlap_counts), how many elements share each element's
// position, as a `dtype` tensor. Computed on the host from the sizes and strides (metadata).
Tensor positions_of(const Geometry& g, int64_t base, Device device) {
  std::vector<int64_t> pos(static_cast<size_t>(numel_of(g.sizes)));
  for_each_position(g, base, [&](int64_t i, int64_t p) { pos[static_cast<size_t>(i)] = p; });
  return from_blob_copy(pos.data(), {static_cast<int64_t>(pos.size())}, kInt64, device);
}
Tensor shares_of(const Geometry& g, int64_t base, const std::vector<int64_t>& count, DType dtype, Device device) {
  std::vector<double> c(static_cast<size_t>(numel_of(g.sizes)));
  for_each_position(g, base, [&](int64_t i, int64_t p) { c[static_cast<size_t>(i)] = static_cast<double>(count[static_cast<size_t>(p)]); });
  return backend::convert_nograd(from_blob_copy(c.data(), {static_cast<int64_t>(c.size())}, kFloat64, device), dtype);
}

// The linear map behind as_strided's gradient. Scatters x (shape from.sizes) into a zero buffer
// covering storage positions [base, base + len) through `from`, adding where positions repeat (in
// element order), then reads the buffer back through `to`. With div_from, each element of x is
// first divided by how many elements of `from` share its position; with div_to, each result
// element by how many elements of `to` share its position (PyTorch's rule for an overlapping
// input, e.g. an expanded one: the gradient reaching its base through ExpandBackward then counts
// every position once). Written with index_add / index_select on x's device, in float32 for the
// 16-bit floats. The adjoint of restride(from, to, df, dt) is restride(to, from, dt, df), which is
// what its backward applies (so double backward works).
Tensor restride(const Tensor& x, const Geometry& from, const Geometry& to, int64_t base, int64_t len, bool div_from, bool div_to) {
  DType acc = x.dtype();
  backend::dispatch_floating(x.dtype(), "as_strided_backward", [&]<typename T>() { acc = backend::is_reduced_float_v<T> ? kFloat32 : x.dtype(); });
  const std::vector<int64_t> from_count = div_from ? overlap_counts(from, base, len) : std::vector<int64_t>();
  const std::vector<int64_t> to_count = div_to ? overlap_counts(to, base, len) : std::vector<int64_t>();
  const Device dev = x.device();
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor v = backend::convert_nograd(dp::reshape(x, {x.numel()}), acc);
    if (!from_count.empty()) v = dp::div(v, shares_of(from, base, from_count, acc, dev));
    const Tensor buf = dp::index_add(dp::zeros({len}, TensorOptions().dtype(acc).device(dev)), 0, positions_of(from, base, dev), v);
    Tensor r = dp::index_select(buf, 0, positions_of(to, base, dev));
    if (!to_count.empty()) r = dp::div(r, shares_of(to, base, to_count, acc, dev));
    out = backend::convert_nograd(dp::reshape(r, to.sizes), x.dtype());
  }
  if (autograd::needs_grad(x)) {
    autograd::record("AsStridedBackwardBackward0", {x}, {out}, [from, to, base, len, div_from, div_to](variable_list&& g) {
      return variable_list{restride(g[0], to, from, base, len, div_to, div_from)};
    });
  }
  return out;
}

// PyTorch's infer_size: resolves one -1 and checks the element count.
Shape infer_size(IntArrayRef shape, int64_t numel, const char* op) {
  Shape res = shape.vec();
  int64_t newsize = 1;
  std::optional<size_t> infer_dim;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      DP_CHECK(!infer_dim, ValueError, op, ": only one dimension can be inferred (shape ", shape_str(shape), ")");
      infer_dim = d;
    } else {
      DP_CHECK(shape[d] >= 0, ValueError, op, ": invalid shape dimension ", shape[d], " in ", shape_str(shape));
      newsize *= shape[d];
    }
  }
  if (numel == newsize || (infer_dim && newsize > 0 && numel % newsize == 0)) {
    if (infer_dim) {
      DP_CHECK(newsize != 0, ShapeError, op, ": cannot reshape tensor of 0 elements into shape ", shape_str(shape),
               " because the unspecified dimension size -1 can be any value and is ambiguous");
      res[*infer_dim] = numel / newsize;
    }
    return res;
  }
  throw ShapeError(detail::str(op, ": shape '", shape_str(shape), "' is invalid for input of size ", numel));
}

// PyTorch's computeStride: strides that let `newshape` view memory laid out as (oldshape,
// oldstride), or nullopt if some new dimension would span two non-contiguous chunks.
std::optional<Shape> compute_stride(IntArrayRef oldshape, IntArrayRef oldstride, IntArrayRef newshape) {
  if (oldshape.empty()) return Shape(newshape.size(), 1);
  const int64_t numel = numel_of(oldshape);
  if (numel == 0 && oldshape.equals(newshape)) return oldstride.vec();
  Shape newstride(newshape.size());
  if (numel == 0) {
    for (int64_t d = static_cast<int64_t>(newshape.size()) - 1; d >= 0; --d) {
      if (d == static_cast<int64_t>(newshape.size()) - 1)
        newstride[d] = 1;
      else
        newstride[d] = std::max<int64_t>(newshape[d + 1], 1) * newstride[d + 1];
    }
    return newstride;
  }
  int64_t view_d = static_cast<int64_t>(newshape.size()) - 1;
  int64_t chunk_base_stride = oldstride.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(oldshape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= oldshape[tensor_d];
    if (tensor_d == 0 || (oldshape[tensor_d - 1] != 1 && oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || newshape[view_d] == 1)) {
        newstride[view_d] = view_numel * chunk_base_stride;
        view_numel *= newshape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = oldstride[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return newstride;
}

// The slice view without checks or history: start/end already clamped, step > 0.
Tensor slice_alias(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Shape sizes = t.sizes(), strides = t.strides();
  const int64_t offset = t.storage_offset() + start * strides[dim];
  sizes[dim] = (end - start + step - 1) / step;
  strides[dim] *= step;
  return alias_with(t, std::move(sizes), std::move(strides), offset);
}

// Pieces of t along dim with the given lengths (which sum to the dim size), as one node.
std::vector<Tensor> split_pieces(const Tensor& t, int64_t dim, const Shape& lengths, const char* name) {
  std::vector<Tensor> outs;
  outs.reserve(lengths.size());
  int64_t start = 0;
  for (int64_t len : lengths) {
    outs.push_back(slice_alias(t, dim, start, start + len, 1));
    start += len;
  }
  if (autograd::needs_grad(t)) {
    autograd::record(name, {t}, outs, [dim](variable_list&& g) { return variable_list{cat(g, dim)}; });
    for (const Tensor& o : outs) autograd::mark_view(o);
  }
  return outs;
}

}  // namespace

Tensor view(const Tensor& t, IntArrayRef sizes) {
  ops::check_defined("view", t);
  Shape shape = infer_size(sizes, t.numel(), "view");
  auto strides = compute_stride(t.sizes(), t.strides(), shape);
  DP_CHECK(strides.has_value(), ShapeError,
           "view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous "
           "subspaces). Use .reshape(...) instead. (view as ",
           shape_str(shape), " of a tensor of size ", t.size_str(), " and stride ", shape_str(t.strides()), ")");
  Tensor out = alias_with(t, std::move(shape), std::move(*strides), t.storage_offset());
  if (!autograd::needs_grad(t)) return out;
  Shape in_sizes = t.sizes();
  return view_history(t, out, "ViewBackward0", [in_sizes](variable_list&& g) { return variable_list{reshape(g[0], in_sizes)}; });
}

Tensor reshape(const Tensor& t, IntArrayRef sizes) {
  ops::check_defined("reshape", t);
  Shape shape = infer_size(sizes, t.numel(), "reshape");
  Shape in_sizes = t.sizes();
  if (auto strides = compute_stride(t.sizes(), t.strides(), shape)) {
    Tensor out = alias_with(t, std::move(shape), std::move(*strides), t.storage_offset());
    return view_history(t, out, "ReshapeAliasBackward0", [in_sizes](variable_list&& g) { return variable_list{reshape(g[0], in_sizes)}; });
  }
  // Not expressible as a view: copy (CloneBackward0), then view the fresh contiguous copy (as
  // PyTorch's _unsafe_view, not marked as a view: nothing else aliases the copy).
  Tensor c = clone(t);
  Tensor out = alias_with(c, shape, contiguous_strides(shape), 0);
  if (autograd::needs_grad(c)) {
    autograd::record("UnsafeViewBackward0", {c}, {out}, [in_sizes](variable_list&& g) { return variable_list{reshape(g[0], in_sizes)}; });
  }
  return out;
}

Tensor as_strided(const Tensor& t, IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset) {
  ops::check_defined("as_strided", t);
  DP_CHECK(sizes.size() == strides.size(), ShapeError, "as_strided: mismatch in length of strides and shape (sizes ", shape_str(sizes), ", strides ",
           shape_str(strides), ")");
  const int64_t off = offset.value_or(t.storage_offset());
  DP_CHECK(off >= 0, ValueError, "as_strided: Tensor: invalid storage offset ", off);
  for (size_t d = 0; d < sizes.size(); ++d) {
    DP_CHECK(sizes[d] >= 0, ShapeError, "as_strided: Trying to create tensor with negative dimension ", sizes[d], ": ", shape_str(sizes));
    DP_CHECK(strides[d] >= 0, ValueError, "as_strided: Negative strides are not supported at the moment, got strides: ", shape_str(strides));
  }
  Geometry out_geo{sizes.vec(), strides.vec(), off};
  const int64_t storage_elems = static_cast<int64_t>(t.storage()->nbytes() / t.element_size());
  if (numel_of(sizes) > 0) {
    const int64_t needed = extent_of(out_geo).second + 1;
    DP_CHECK(needed <= storage_elems, ValueError, "as_strided: setStorage: sizes ", shape_str(sizes), ", strides ", shape_str(strides),
             ", storage offset ", off, ", and itemsize ", t.element_size(), " requiring a storage size of ", needed * t.element_size(),
             " are out of bounds for storage of size ", storage_elems * static_cast<int64_t>(t.element_size()));
  }
  Tensor out = alias_with(t, sizes.vec(), strides.vec(), off);
  if (!autograd::needs_grad(t)) return out;
  Geometry in_geo{t.sizes(), t.strides(), t.storage_offset()};
  auto [lo_in, hi_in] = extent_of(in_geo);
  auto [lo_out, hi_out] = extent_of(out_geo);
  const int64_t base = std::min(lo_in, lo_out), len = std::max(hi_in, hi_out) - base + 1;
  return view_history(t, out, "AsStridedBackward0", [in_geo, out_geo, base, len](variable_list&& g) {
    return variable_list{restride(g[0], out_geo, in_geo, base, len, /*div_from=*/false, /*div_to=*/true)};
  });
}

Tensor slice(const Tensor& t, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  ops::check_defined("slice", t);
  DP_CHECK(t.dim() > 0, IndexError, "slice() cannot be applied to a 0-dim tensor.");
  dim = wrap_dim(dim, t.dim(), "slice");
  DP_CHECK(step > 0, ValueError, "slice step must be positive, got ", step);
  const int64_t size = t.sizes()[dim];
  int64_t s = start.value_or(0), e = end.value_or(INT64_MAX);
  if (s < 0) s += size;
  if (e < 0) e += size;
  if (s < 0)
    s = 0;
  else if (s >= size)
    s = size;
  if (e < s)
    e = s;
  else if (e >= size)
    e = size;
  Tensor out = slice_alias(t, dim, s, e, step);
  if (!autograd::needs_grad(t)) return out;
  Shape in_sizes = t.sizes();
  return view_history(t, out, "SliceBackward0", [in_sizes, dim, s, e, step](variable_list&& g) {
    return variable_list{view_scatter(
        g[0], in_sizes, [dim, s, e, step](const Tensor& z) { return slice(z, dim, s, e, step); }, "SliceBackwardBackward0")};
  });
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  ops::check_defined("narrow", t);
  DP_CHECK(t.dim() > 0, IndexError, "narrow() cannot be applied to a 0-dim tensor.");
  dim = wrap_dim(dim, t.dim(), "narrow");
  DP_CHECK(length >= 0, ValueError, "narrow(): length must be non-negative, got ", length);
  const int64_t cur = t.sizes()[dim];
  DP_CHECK(start >= -cur && start <= cur, IndexError, "narrow(): start out of range (expected to be in range of [", -cur, ", ", cur, "], but got ",
           start, ")");
  if (start < 0) start += cur;
  DP_CHECK(start <= cur - length, IndexError, "narrow(): start (", start, ") + length (", length, ") exceeds dimension size (", cur,
           ") of tensor of size ", t.size_str(), " at dimension ", dim);
  return slice(t, dim, start, start + length, 1);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  ops::check_defined("select", t);
  DP_CHECK(t.dim() > 0, IndexError, "select() cannot be applied to a 0-dim tensor.");
  dim = wrap_dim(dim, t.dim(), "select");
  const int64_t size = t.sizes()[dim];
  DP_CHECK(index >= -size && index < size, IndexError, "select(): index ", index, " out of range for tensor of size ", t.size_str(), " at dimension ",
           dim);
  if (index < 0) index += size;
  Shape sizes = t.sizes(), strides = t.strides();
  const int64_t offset = t.storage_offset() + index * strides[dim];
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  Tensor out = alias_with(t, std::move(sizes), std::move(strides), offset);
  if (!autograd::needs_grad(t)) return out;
  Shape in_sizes = t.sizes();
  return view_history(t, out, "SelectBackward0", [in_sizes, dim, index](variable_list&& g) {
    return variable_list{view_scatter(
        g[0], in_sizes, [dim, index](const Tensor& z) { return select(z, dim, index); }, "SelectBackwardBackward0")};
  });
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  ops::check_defined("transpose", t);
  const int64_t n = t.dim();
  dim0 = wrap_dim(dim0, n, "transpose");
  dim1 = wrap_dim(dim1, n, "transpose");
  Shape sizes = t.sizes(), strides = t.strides();
  if (n > 0) {
    std::swap(sizes[dim0], sizes[dim1]);
    std::swap(strides[dim0], strides[dim1]);
  }
  Tensor out = alias_with(t, std::move(sizes), std::move(strides), t.storage_offset());
  return view_history(t, out, "TransposeBackward0", [dim0, dim1](variable_list&& g) { return variable_list{transpose(g[0], dim0, dim1)}; });
}

Tensor permute(const Tensor& t, IntArrayRef dims) {
  ops::check_defined("permute", t);
  const int64_t n = t.dim();
  DP_CHECK(static_cast<int64_t>(dims.size()) == n, ShapeError,
           "permute: number of dimensions in the tensor input does not match the length of the desired ordering of dimensions i.e. "
           "input.dim() = ",
           n, " is not equal to len(dims) = ", dims.size());
  Shape perm(n), inv(n, -1), sizes(n), strides(n);
  for (int64_t i = 0; i < n; ++i) {
    perm[i] = wrap_dim(dims[i], n, "permute");
    DP_CHECK(inv[perm[i]] == -1, ValueError, "permute: repeated dim in permute (dims ", shape_str(dims), ")");
    inv[perm[i]] = i;
    sizes[i] = t.sizes()[perm[i]];
    strides[i] = t.strides()[perm[i]];
  }
  Tensor out = alias_with(t, std::move(sizes), std::move(strides), t.storage_offset());
  return view_history(t, out, "PermuteBackward0", [inv](variable_list&& g) { return variable_list{permute(g[0], inv)}; });
}

Tensor expand(const Tensor& t, IntArrayRef sizes) {
  ops::check_defined("expand", t);
  const int64_t ndim = static_cast<int64_t>(sizes.size()), tdim = t.dim();
  DP_CHECK(ndim >= tdim, ShapeError, "expand(", t.describe(), ", size=", shape_str(sizes), "): the number of sizes provided (", ndim,
           ") must be greater or equal to the number of dimensions in the tensor (", tdim, ")");
  Shape out_sizes(ndim), out_strides(ndim);
  for (int64_t i = ndim - 1; i >= 0; --i) {
    const int64_t offset = ndim - 1 - i;
    const int64_t d = tdim - 1 - offset;
    int64_t size = d >= 0 ? t.sizes()[d] : 1;
    int64_t stride = d >= 0 ? t.strides()[d] : (i == ndim - 1 ? 1 : out_sizes[i + 1] * out_strides[i + 1]);
    int64_t target = sizes[i];
    if (target == -1) {
      DP_CHECK(d >= 0, ShapeError, "expand: The expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension ", i,
               " (target sizes ", shape_str(sizes), ")");
      target = size;
    }
    DP_CHECK(target >= 0, ShapeError, "expand: Trying to create tensor with negative dimension ", target, ": ", shape_str(sizes));
    if (size != target) {
      DP_CHECK(size == 1, ShapeError, "The expanded size of the tensor (", target, ") must match the existing size (", size,
               ") at non-singleton dimension ", i, ".  Target sizes: ", shape_str(sizes), ".  Tensor sizes: ", t.size_str());
      size = target;
      stride = 0;
    }
    out_sizes[i] = size;
    out_strides[i] = stride;
  }
  Tensor out = alias_with(t, std::move(out_sizes), std::move(out_strides), t.storage_offset());
  if (!autograd::needs_grad(t)) return out;
  Shape in_sizes = t.sizes();
  return view_history(t, out, "ExpandBackward0", [in_sizes](variable_list&& g) { return variable_list{sum_to(g[0], in_sizes)}; });
}

Tensor squeeze(const Tensor& t) {
  ops::check_defined("squeeze", t);
  Shape sizes, strides;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] == 1) continue;
    sizes.push_back(t.sizes()[d]);
    strides.push_back(t.strides()[d]);
  }
  Tensor out = alias_with(t, std::move(sizes), std::move(strides), t.storage_offset());
  if (!autograd::needs_grad(t)) return out;
  Shape in_sizes = t.sizes();
  return view_history(t, out, "SqueezeBackward0", [in_sizes](variable_list&& g) { return variable_list{reshape(g[0], in_sizes)}; });
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  ops::check_defined("squeeze", t);
  dim = wrap_dim(dim, t.dim(), "squeeze");
  Shape sizes = t.sizes(), strides = t.strides();
  if (t.dim() > 0 && sizes[dim] == 1) {
    sizes.erase(sizes.begin() + dim);
    strides.erase(strides.begin() + dim);
  }
  Tensor out = alias_with(t, std::move(sizes), std::move(strides), t.storage_offset());
  if (!autograd::needs_grad(t)) return out;
  Shape in_sizes = t.sizes();
  return view_history(t, out, "SqueezeBackward1", [in_sizes](variable_list&& g) { return variable_list{reshape(g[0], in_sizes)}; });
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  ops::check_defined("unsqueeze", t);
  const int64_t n = t.dim();
  dim = wrap_dim(dim, n + 1, "unsqueeze");
  Shape sizes = t.sizes(), strides = t.strides();
  const int64_t new_stride = dim >= n ? 1 : sizes[dim] * strides[dim];
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, new_stride);
  Tensor out = alias_with(t, std::move(sizes), std::move(strides), t.storage_offset());
  return view_history(t, out, "UnsqueezeBackward0", [dim](variable_list&& g) { return variable_list{squeeze(g[0], dim)}; });
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  ops::check_defined("flatten", t);
  const int64_t n = t.dim();
  start_dim = wrap_dim(start_dim, n, "flatten");
  end_dim = wrap_dim(end_dim, n, "flatten");
  DP_CHECK(start_dim <= end_dim, ValueError, "flatten() has invalid args: start_dim (", start_dim, ") cannot come after end_dim (", end_dim, ")");
  if (n == 0) return reshape(t, {1});
  if (start_dim == end_dim) return t;
  Shape shape;
  int64_t flat = 1;
  for (int64_t d = 0; d < n; ++d) {
    if (d < start_dim || d > end_dim) {
      shape.push_back(t.sizes()[d]);
    } else {
      flat *= t.sizes()[d];
      if (d == end_dim) shape.push_back(flat);
    }
  }
  return reshape(t, shape);
}

Tensor unflatten(const Tensor& t, int64_t dim, IntArrayRef sizes) {
  ops::check_defined("unflatten", t);
  DP_CHECK(t.dim() > 0, ShapeError, "unflatten: cannot be applied to a 0-dim tensor");
  dim = wrap_dim(dim, t.dim(), "unflatten");
  DP_CHECK(!sizes.empty(), ValueError, "unflatten: sizes must be non-empty");
  const int64_t size = t.sizes()[dim];
  Shape resolved = sizes.vec();
  int64_t known = 1;
  std::optional<size_t> infer;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      DP_CHECK(!infer, ValueError, "unflatten: only one dimension can be inferred (sizes ", shape_str(sizes), ")");
      infer = i;
    } else {
      DP_CHECK(sizes[i] >= 0, ValueError, "unflatten: invalid size ", sizes[i], " in ", shape_str(sizes));
      known *= sizes[i];
    }
  }
  if (infer) {
    DP_CHECK(known > 0 && size % known == 0, ShapeError, "unflatten: Provided sizes ", shape_str(sizes), " don't multiply up to the size of dim ",
             dim, " (", size, ") in the input tensor of size ", t.size_str());
    resolved[*infer] = size / known;
  } else {
    DP_CHECK(known == size, ShapeError, "unflatten: Provided sizes ", shape_str(sizes), " don't multiply up to the size of dim ", dim, " (", size,
             ") in the input tensor of size ", t.size_str());
  }
  Shape shape(t.sizes().begin(), t.sizes().begin() + dim);
  shape.insert(shape.end(), resolved.begin(), resolved.end());
  shape.insert(shape.end(), t.sizes().begin() + dim + 1, t.sizes().end());
  return view(t, shape);
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  ops::check_defined("split", t);
  DP_CHECK(t.dim() > 0, ShapeError, "split expects at least a 1-dimensional tensor");
  dim = wrap_dim(dim, t.dim(), "split");
  DP_CHECK(split_size >= 0, ValueError, "split expects split_size be non-negative, but got split_size=", split_size);
  const int64_t dim_size = t.sizes()[dim];
  DP_CHECK(split_size > 0 || dim_size == 0, ValueError, "split_size can only be 0 if dimension size is 0, but got dimension size of ", dim_size);
  int64_t num_splits = 1;
  if (split_size != 0) num_splits = std::max<int64_t>((dim_size + split_size - 1) / split_size, 1);
  Shape lengths(num_splits, split_size);
  lengths.back() = split_size - (split_size * num_splits - dim_size);
  return split_pieces(t, dim, lengths, "SplitBackward0");
}

std::vector<Tensor> split_with_sizes(const Tensor& t, IntArrayRef sizes, int64_t dim) {
  ops::check_defined("split_with_sizes", t);
  DP_CHECK(t.dim() > 0, ShapeError, "split expects at least a 1-dimensional tensor");
  dim = wrap_dim(dim, t.dim(), "split_with_sizes");
  const int64_t dim_size = t.sizes()[dim];
  int64_t total = 0;
  for (int64_t s : sizes) {
    DP_CHECK(s >= 0, ValueError, "split_with_sizes expects split_sizes have only non-negative entries, but got split_sizes=", shape_str(sizes));
    total += s;
  }
  DP_CHECK(total == dim_size, ShapeError, "split_with_sizes expects split_sizes to sum exactly to ", dim_size, " (input tensor's size at dimension ",
           dim, "), but got split_sizes=", shape_str(sizes));
  return split_pieces(t, dim, sizes.vec(), "SplitWithSizesBackward0");
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  ops::check_defined("chunk", t);
  DP_CHECK(t.dim() > 0, ShapeError, "chunk expects at least a 1-dimensional tensor");
  DP_CHECK(chunks > 0, ValueError, "chunk expects `chunks` to be greater than 0, got: ", chunks);
  dim = wrap_dim(dim, t.dim(), "chunk");
  const int64_t dim_size = t.sizes()[dim];
  const int64_t split_size = (dim_size + chunks - 1) / chunks;
  // An empty dim gives `chunks` empty pieces (split would give one).
  if (split_size == 0 && dim_size == 0) return split_with_sizes(t, Shape(chunks, 0), dim);
  return split(t, split_size, dim);
}

}  // namespace dp
