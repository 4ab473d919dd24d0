// Shape ops that copy: cat, stack, contiguous, clone.
#include "dp/core/pooled.h"
#include "backend/copy_kernels.h"
#include "dp/autograd/function.h"
#include "dp/ops/factory.h"
#include "dp/ops/shape.h"
#include "ops/common.h"
#include "amp/autocast_ops.h"

namespace dp {

namespace {

using autograd::variable_list;

// Device check over a list, naming two different devices (DeviceError).
void check_list_device(const char* op, const std::vector<Tensor>& ts) {
  for (size_t i = 1; i < ts.size(); ++i)
    DP_CHECK(ts[i].device() == ts[0].device(), DeviceError, op, ": expected all tensors to be on the same device, but found at least two devices, ",
             ts[0].device().str(), " (tensor 0) and ", ts[i].device().str(), " (tensor ", i, ")!");
}

DType promoted(const std::vector<Tensor>& ts) {
  DType dt = ts[0].dtype();
  for (size_t i = 1; i < ts.size(); ++i) dt = promote_types(dt, ts[i].dtype());
  return dt;
}

// A view of `out` narrowed along dim, without history (for the internal copies).
Tensor raw_narrow(const Tensor& out, int64_t dim, int64_t start, int64_t length) {
  Shape sizes = out.sizes();
  sizes[dim] = length;
  return Tensor(::dp::detail::make_pooled<TensorImpl>(out.storage(), std::move(sizes), out.strides(),
                                                      out.storage_offset() + start * out.strides()[dim], out.dtype()));
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (autocast::detail::Cast ac{autocast::detail::Op::cat, tensors}) return ac([&] { return dp::cat(ac.all(), dim); });
  DP_CHECK(!tensors.empty(), ValueError, "cat(): expected a non-empty list of Tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    DP_CHECK(tensors[i].defined(), ValueError, "cat(): tensor ", i, " in the list is undefined");
    DP_CHECK(tensors[i].dim() > 0, ShapeError, "cat(): zero-dimensional tensor (at position ", i, ") cannot be concatenated");
  }
  check_list_device("cat", tensors);
  const DType out_dtype = promoted(tensors);
  const Device device = tensors[0].device();
  // Legacy rule: 1-D tensors of size [0] are skipped (they may have any other shape around them).
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; };
  const Tensor* ref = nullptr;
  for (const Tensor& t : tensors)
    if (!skipped(t)) {
      ref = &t;
      break;
    }
  Tensor out;
  std::vector<int64_t> offsets(tensors.size(), 0);
  if (!ref) {
    dim = 0;
    out = make_empty({0}, out_dtype, device);
  } else {
    const int64_t nd = ref->dim();
    dim = wrap_dim(dim, nd, "cat");
    Shape out_sizes = ref->sizes();
    int64_t cat_size = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      if (skipped(t)) continue;
      DP_CHECK(t.dim() == nd, ShapeError, "cat(): Tensors must have same number of dimensions: got ", nd, " and ", t.dim(), " (tensor ", i,
               " has size ", t.size_str(), ", the first has ", ref->size_str(), ")");
      for (int64_t d = 0; d < nd; ++d) {
        if (d == dim) continue;
        DP_CHECK(t.sizes()[d] == out_sizes[d], ShapeError, "cat(): Sizes of tensors must match except in dimension ", dim, ". Expected size ",
                 out_sizes[d], " but got size ", t.sizes()[d], " for tensor number ", i, " in the list (sizes ", ref->size_str(), " and ",
                 t.size_str(), ")");
      }
      cat_size += t.sizes()[dim];
    }
    out_sizes[dim] = cat_size;
    out = make_empty(out_sizes, out_dtype, device);
    int64_t off = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      offsets[i] = off;
      if (skipped(tensors[i])) continue;
      const int64_t len = tensors[i].sizes()[dim];
      if (len > 0)
        backend::copy_kernel(backend::copy_device_type((raw_narrow(out, dim, off, len)), (tensors[i])), raw_narrow(out, dim, off, len), tensors[i]);
      off += len;
    }
  }
  if (autograd::any_needs_grad(tensors)) {
    std::vector<Shape> in_sizes;
    std::vector<DType> in_dtypes;
    std::vector<bool> in_skipped;
    for (const Tensor& t : tensors) {
      in_sizes.push_back(t.sizes());
      in_dtypes.push_back(t.dtype());
      in_skipped.push_back(skipped(t));
    }
    autograd::record("CatBackward0", tensors, {out}, [dim, offsets, in_sizes, in_dtypes, in_skipped](variable_list&& g) {
      variable_list grads(in_sizes.size());
      for (size_t i = 0; i < in_sizes.size(); ++i) {
        if (!is_floating_point(in_dtypes[i])) continue;
        if (in_skipped[i]) {
          grads[i] = zeros({0}, options_of(g[0]).dtype(in_dtypes[i]));
          continue;
        }
        grads[i] = narrow(g[0], dim, offsets[i], in_sizes[i][dim]).to(in_dtypes[i]);
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (autocast::detail::Cast ac{autocast::detail::Op::stack, tensors}) return ac([&] { return dp::stack(ac.all(), dim); });
  DP_CHECK(!tensors.empty(), ValueError, "stack expects a non-empty TensorList");
  for (size_t i = 0; i < tensors.size(); ++i) {
    DP_CHECK(tensors[i].defined(), ValueError, "stack(): tensor ", i, " in the list is undefined");
    DP_CHECK(tensors[i].sizes() == tensors[0].sizes(), ShapeError, "stack expects each tensor to be equal size, but got ", tensors[0].size_str(),
             " at entry 0 and ", tensors[i].size_str(), " at entry ", i);
  }
  check_list_device("stack", tensors);
  const Shape& in_sizes = tensors[0].sizes();
  const int64_t nd = static_cast<int64_t>(in_sizes.size());
  dim = wrap_dim(dim, nd + 1, "stack");
  Shape out_sizes = in_sizes;
  out_sizes.insert(out_sizes.begin() + dim, static_cast<int64_t>(tensors.size()));
  Tensor out = make_empty(out_sizes, promoted(tensors), tensors[0].device());
  for (size_t i = 0; i < tensors.size(); ++i) {
    Shape sizes = out.sizes(), strides = out.strides();
    const int64_t offset = static_cast<int64_t>(i) * strides[dim];
    sizes.erase(sizes.begin() + dim);
    strides.erase(strides.begin() + dim);
    if (out.numel() > 0)
      backend::copy_kernel(
          backend::copy_device_type(
              (Tensor(::dp::detail::make_pooled<TensorImpl>(out.storage(), std::move(sizes), std::move(strides), offset, out.dtype()))),
              (tensors[i])),
          Tensor(::dp::detail::make_pooled<TensorImpl>(out.storage(), std::move(sizes), std::move(strides), offset, out.dtype())), tensors[i]);
  }
  if (autograd::any_needs_grad(tensors)) {
    std::vector<DType> in_dtypes;
    for (const Tensor& t : tensors) in_dtypes.push_back(t.dtype());
    autograd::record("StackBackward0", tensors, {out}, [dim, in_dtypes](variable_list&& g) {
      variable_list grads(in_dtypes.size());
      for (size_t i = 0; i < in_dtypes.size(); ++i)
        if (is_floating_point(in_dtypes[i])) grads[i] = select(g[0], dim, static_cast<int64_t>(i)).to(in_dtypes[i]);
      return grads;
    });
  }
  return out;
}

Tensor clone(const Tensor& t) {
  ops::check_defined("clone", t);
  Tensor out = make_empty(t.sizes(), t.dtype(), t.device());
  backend::copy_kernel(backend::copy_device_type(out, t), out, t);
  if (autograd::needs_grad(t)) {
    autograd::record("CloneBackward0", {t}, {out}, [](variable_list&& g) { return variable_list{g[0]}; });
  }
  return out;
}

Tensor contiguous(const Tensor& t) {
  ops::check_defined("contiguous", t);
  return t.is_contiguous() ? t : clone(t);
}

}  // namespace dp
