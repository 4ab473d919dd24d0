// Indexing ops: index_select, gather, scatter_add(_), index_add(_), embedding, one_hot, masked_fill.
//
// Every index is checked before anything is written, so an out-of-range index is an IndexError
// naming the op, the value and the valid range, and never a partial write or a crash.
//
// The kernels are the backends' (backend/index_kernels.h, which also says how indices are checked
// on each backend); this file checks the arguments, calls one kernel and records the backward.
#include "dp/core/pooled.h"
#include "dp/ops/index.h"

#include <algorithm>
#include <vector>

#include "backend/index_kernels.h"
#include "backend/copy_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/common.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

// ---------------------------------------------------------------------------------------------
// Helpers (no autograd).

Tensor raw_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}

Tensor raw_copy(const Tensor& t) {
  Tensor c = make_empty(t.sizes(), t.dtype(), t.device());
  backend::copy_kernel(backend::copy_device_type(c, t), c, t);
  return c;
}

Tensor raw_zeros(IntArrayRef sizes, DType dt, Device dev) {
  Tensor z = make_empty(sizes, dt, dev);
  backend::fill_kernel(z.device().type, z, 0);
  return z;
}

// A 0-dim tensor seen as [1] (kernels index a dimension).
Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? raw_view(t, {1}, {1}, t.storage_offset()) : t; }

int64_t size_at(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.sizes()[d]; }

void check_inputs(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) ops::check_defined(op, *t);
  ops::check_same_device(op, ts);
}

void check_index_dtype(const char* op, const Tensor& index) {
  DP_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, DTypeError, op, ": expected an int64 or int32 index tensor, got ",
           dtype_name(index.dtype()), " ", index.size_str());
}

using backend::read_index_values;
using backend::read_indices;

// out (contiguous, out.size(dim) == index.numel(); a.dim() >= 1) = a picked along dim by index.
void index_select_into(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool check) {
  backend::index_select_kernel(a.device().type, op, out, a, dim, index, check);
}

// self (0-dim seen as [1]) [..., index[j], ...] += src[..., j, ...] along dim. In-place callers
// check the indices first (backend::check_indices_kernel) and pass check = false.
void index_add_into(const char* op, const Tensor& self_in, int64_t dim, const Tensor& index, const Tensor& src_in, bool check) {
  const Tensor self = as_1d(self_in), src = as_1d(src_in);
  backend::index_add_kernel(self.device().type, op, self, dim, index, src, check);
}

// Checks done by the callers: index.dim() == a.dim(), index.size(d) <= a.size(d) for d != dim,
// index.size(d) <= out_shape[d]. out[p] = a[p with dim := index[p]] for p in index's extent;
// zeros elsewhere in out_shape. check = false: the indices were checked before (backward).
Tensor gather_kernel(const char* op, const Tensor& a_in, int64_t dim, const Tensor& index_in, IntArrayRef out_shape, bool check) {
  const Tensor a = as_1d(a_in), index = as_1d(index_in);
  Tensor out = make_empty(out_shape, a.dtype(), a.device());
  if (!IntArrayRef(index_in.sizes()).equals(out_shape)) backend::fill_kernel(out.device().type, out, 0);
  backend::gather_kernel(a.device().type, op, as_1d(out), a, dim, index, check);
  return out;
}

// self[p with dim := index[p]] += src[p] for p in index's extent (serially on the CPU, atomics on
// CUDA).
void scatter_add_kernel(const char* op, const Tensor& self_in, int64_t dim, const Tensor& index_in, const Tensor& src_in, bool check) {
  const Tensor self = as_1d(self_in), index = as_1d(index_in), src = as_1d(src_in);
  backend::scatter_add_kernel(self.device().type, op, self, dim, index, src, check);
}

// ---------------------------------------------------------------------------------------------
// Argument checks.

int64_t check_scatter(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  check_inputs(op, {&self, &index, &src});
  check_index_dtype(op, index);
  DP_CHECK(self.dtype() == src.dtype(), DTypeError, op, ": Expected self.dtype to be equal to src.dtype (got ", dtype_name(self.dtype()), " and ",
           dtype_name(src.dtype()), ")");
  DP_CHECK(index.dim() == self.dim() && src.dim() == self.dim(), ShapeError, op,
           ": Index tensor must have the same number of dimensions as self and src tensors (got index ", index.size_str(), ", self ", self.size_str(),
           ", src ", src.size_str(), ")");
  dim = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), op);
  for (int64_t d = 0; d < std::max<int64_t>(self.dim(), 1); ++d) {
    const bool ok = size_at(index, d) <= size_at(src, d) && (d == dim || size_at(index, d) <= size_at(self, d));
    DP_CHECK(ok, ShapeError, op, ": Expected index ", index.size_str(), " to be smaller than self ", self.size_str(), " apart from dimension ", dim,
             " and to be smaller size than src ", src.size_str());
  }
  return dim;
}

int64_t check_index_add(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  check_inputs(op, {&self, &index, &src});
  check_index_dtype(op, index);
  DP_CHECK(index.dim() <= 1, IndexError, op, ": Index is supposed to be a vector, got a ", index.dim(), "-D tensor of shape ", index.size_str());
  dim = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), op);
  DP_CHECK(self.dtype() == src.dtype(), DTypeError, op, ": self (", dtype_name(self.dtype()), ") and source (", dtype_name(src.dtype()),
           ") must have the same scalar type");
  bool same_slices = src.dim() == self.dim();
  for (int64_t d = 0; same_slices && d < self.dim(); ++d) same_slices = d == dim || src.size(d) == self.size(d);
  DP_CHECK(same_slices, ShapeError, op, ": source ", src.size_str(), " and self ", self.size_str(), " must have the same shape apart from dimension ",
           dim);
  DP_CHECK(index.numel() == size_at(src, dim), ShapeError, op, ": Number of indices (", index.numel(), ") should be equal to source.size(dim): (",
           size_at(src, dim), "), for dim: ", dim);
  return dim;
}

// The ops behind the public functions; check = false skips the CUDA range check (and its wait)
// where the indices were checked already: the backward passes.
Tensor index_select_op(const Tensor& a, int64_t dim, const Tensor& index, bool check);
Tensor scatter_add_op(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, bool check);
Tensor index_add_op(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, bool check);

// The gradient of scatter_add w.r.t. src, src-shaped: g gathered over index's extent, zeros
// beyond it (src may be larger than index). Differentiable: its backward scatters back.
Tensor gather_padded(const char* op, const Tensor& g, int64_t dim, const Tensor& index, IntArrayRef out_shape);

void record_gather(const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index) {
  if (!autograd::needs_grad(a)) return;
  SavedVariable si(index, false);
  Shape a_shape = a.sizes();
  autograd::record("GatherBackward0", {a}, {out}, [si, dim, a_shape](variable_list&& g) {
    Tensor z = raw_zeros(a_shape, g[0].dtype(), g[0].device());
    return variable_list{scatter_add_op(z, dim, si.unpack(), g[0], false)};
  });
}

Tensor gather_padded(const char* op, const Tensor& g, int64_t dim, const Tensor& index, IntArrayRef out_shape) {
  Tensor out = gather_kernel(op, g, dim, index, out_shape, false);
  record_gather(out, g, dim, index);
  return out;
}

// Both nodes of scatter_add / scatter_add_: self gets g, src gets g gathered.
autograd::FunctionNode::BackwardFn scatter_add_backward(int64_t dim, const Tensor& index, const Shape& src_shape, bool g_self, bool g_src) {
  SavedVariable si(index, false);
  return [si, dim, src_shape, g_self, g_src](variable_list&& g) {
    Tensor ds = g_self ? g[0] : Tensor();
    Tensor dsrc = g_src ? gather_padded("scatter_add backward", g[0], dim, si.unpack(), src_shape) : Tensor();
    return variable_list{ds, dsrc};
  };
}

autograd::FunctionNode::BackwardFn index_add_backward(int64_t dim, const Tensor& index, bool g_self, bool g_src) {
  SavedVariable si(index, false);
  return [si, dim, g_self, g_src](variable_list&& g) {
    Tensor ds = g_self ? g[0] : Tensor();
    Tensor dsrc = g_src ? index_select_op(g[0], dim, si.unpack(), false) : Tensor();
    return variable_list{ds, dsrc};
  };
}

// For in-place ops: self's new grad_fn takes (self's old history, src).
void rebase_inplace(Tensor& self, const Tensor& src, const char* name, autograd::FunctionNode::BackwardFn fn) {
  auto node = ::dp::detail::make_pooled<autograd::FunctionNode>(name, std::move(fn));
  node->add_next_edge(autograd::gradient_edge(self));
  node->add_next_edge(autograd::gradient_edge(src));
  autograd::rebase_history(self, node);
}

// The index tensor as a contiguous [N] view (int32 or int64, both fine for index_add), without
// reading the values (index_add checks them).
Tensor flat_index(const Tensor& indices) {
  const Tensor c = backend::contiguous_nograd(indices);
  return raw_view(c, {c.numel()}, {1}, c.storage_offset());
}

// Dense gradient of embedding w.r.t. weight [num_weights, D]: rows of g added at their indices,
// serially (repeated indices add up); the padding row gets nothing. Written with dp ops, so it
// is differentiable w.r.t. g. Without grad mode (the usual backward) a backend with a fused kernel
// does it in one (CUDA: an atomic scatter-add that skips the padding index, float sums in an
// unspecified order, as PyTorch's index_add; PyTorch's embedding backward sorts the indices to be
// deterministic).
Tensor embedding_dense_backward(const Tensor& g, const Tensor& indices, int64_t num_weights, int64_t padding_idx) {
  const int64_t D = g.size(-1), N = indices.numel();
  if (!GradMode::is_enabled() && backend::embedding_backward_kernel.has(g.device().type)) {
    Tensor gw = raw_zeros({num_weights, D}, g.dtype(), g.device());
    backend::embedding_backward_kernel(g.device().type, gw, g, indices, padding_idx);
    return gw;
  }
  Tensor g2 = dp::reshape(g, {N, D});
  Tensor idx = flat_index(indices);
  if (padding_idx >= 0) {
    const Tensor mask = dp::reshape(dp::eq(idx, padding_idx), {N, 1});
    g2 = dp::masked_fill(g2, mask, 0);
  }
  return index_add_op(raw_zeros({num_weights, D}, g.dtype(), g.device()), 0, idx, g2, false);
}

Tensor index_select_op(const Tensor& a, int64_t dim, const Tensor& index, bool check) {
  check_inputs("index_select", {&a, &index});
  check_index_dtype("index_select", index);
  DP_CHECK(index.dim() <= 1, IndexError, "index_select: Index is supposed to be a vector, got a ", index.dim(), "-D tensor of shape ",
           index.size_str());
  dim = wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "index_select");
  Tensor out;
  if (a.dim() == 0) {
    // Only index 0 exists. Indices in host memory are checked before their count (as PyTorch's CPU
    // op); on a device the kernel checks them.
    if (index.is_cpu()) read_indices("index_select", index, dim, 1);
    DP_CHECK(index.numel() == 1, IndexError, "index_select: Index to scalar can have only 1 value, got ", index.numel(), " value(s)");
    out = make_empty({}, a.dtype(), a.device());
    index_select_into("index_select", raw_view(out, {1}, {1}, 0), as_1d(a), 0, index, check);
  } else {
    Shape out_shape = a.sizes();
    out_shape[dim] = index.numel();
    out = make_empty(out_shape, a.dtype(), a.device());
    index_select_into("index_select", out, a, dim, index, check);
  }
  if (autograd::needs_grad(a)) {
    SavedVariable si(index, false);
    Shape a_shape = a.sizes();
    autograd::record("IndexSelectBackward0", {a}, {out}, [si, dim, a_shape](variable_list&& g) {
      Tensor z = raw_zeros(a_shape, g[0].dtype(), g[0].device());
      return variable_list{index_add_op(z, dim, si.unpack(), g[0], false)};
    });
  }
  return out;
}

Tensor scatter_add_op(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, bool check) {
  dim = check_scatter("scatter_add", a, dim, index, src);
  Tensor out = raw_copy(a);
  scatter_add_kernel("scatter_add", out, dim, index, src, check);
  const bool ga = autograd::needs_grad(a), gs = autograd::needs_grad(src);
  if (ga || gs) autograd::record("ScatterAddBackward0", {a, src}, {out}, scatter_add_backward(dim, index, src.sizes(), ga, gs));
  return out;
}

Tensor index_add_op(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, bool check) {
  dim = check_index_add("index_add", a, dim, index, src);
  Tensor out = raw_copy(a);
  index_add_into("index_add", out, dim, index, src, check);
  const bool ga = autograd::needs_grad(a), gs = autograd::needs_grad(src);
  if (ga || gs) autograd::record("IndexAddBackward0", {a, src}, {out}, index_add_backward(dim, index, ga, gs));
  return out;
}

}  // namespace

// -----------------------------------------------------------------------------------------------

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) { return index_select_op(a, dim, index, true); }

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  check_inputs("gather", {&a, &index});
  check_index_dtype("gather", index);
  DP_CHECK(index.dim() == a.dim(), ShapeError, "gather: Index tensor must have the same number of dimensions as input tensor (got index ",
           index.size_str(), " and input ", a.size_str(), ")");
  dim = wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "gather");
  for (int64_t d = 0; d < a.dim(); ++d)
    DP_CHECK(d == dim || index.size(d) <= a.size(d), ShapeError, "gather: Size does not match at dimension ", d, " expected index ", index.size_str(),
             " to be smaller than self ", a.size_str(), " apart from dimension ", dim);
  Tensor out = gather_kernel("gather", a, dim, index, index.sizes(), true);
  record_gather(out, a, dim, index);
  return out;
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) { return scatter_add_op(a, dim, index, src, true); }

Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  dim = check_scatter("scatter_add_", self, dim, index, src);
  autograd::check_inplace(self, "scatter_add_");
  const bool ga = autograd::needs_grad(self), gs = autograd::needs_grad(src);
  backend::check_indices_kernel(self.device().type, "scatter_add_", index, dim, size_at(self, dim));
  scatter_add_kernel("scatter_add_", self, dim, index, src, false);
  self.bump_version();
  if (ga || gs) rebase_inplace(self, src, "ScatterAddBackward0", scatter_add_backward(dim, index, src.sizes(), ga, gs));
  return self;
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) { return index_add_op(a, dim, index, src, true); }

Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  dim = check_index_add("index_add_", self, dim, index, src);
  autograd::check_inplace(self, "index_add_");
  const bool ga = autograd::needs_grad(self), gs = autograd::needs_grad(src);
  backend::check_indices_kernel(self.device().type, "index_add_", index, dim, size_at(self, dim));
  index_add_into("index_add_", self, dim, index, src, false);
  self.bump_version();
  if (ga || gs) rebase_inplace(self, src, "IndexAddBackward0", index_add_backward(dim, index, ga, gs));
  return self;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  check_inputs("embedding", {&weight, &indices});
  DP_CHECK(weight.dim() == 2, ShapeError, "embedding: 'weight' must be 2-D [num_embeddings, embedding_dim], got shape ", weight.size_str());
  DP_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, DTypeError,
           "embedding: Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got ",
           legacy_type_name(indices.dtype()), " instead");
  const int64_t V = weight.size(0), D = weight.size(1);
  DP_CHECK(padding_idx == -1 || (padding_idx >= 0 && padding_idx < V), ValueError, "embedding: padding_idx must be within num_embeddings (got ",
           padding_idx, " for ", V, " embeddings; -1 means none)");
  Shape out_shape = indices.sizes();
  out_shape.push_back(D);
  Tensor out = make_empty(out_shape, weight.dtype(), weight.device());
  backend::embedding_forward_kernel(weight.device().type, out, weight, indices);
  if (autograd::needs_grad(weight)) {
    SavedVariable si(indices, false);
    autograd::record("EmbeddingBackward0", {weight}, {out},
                     [si, V, padding_idx](variable_list&& g) { return variable_list{embedding_dense_backward(g[0], si.unpack(), V, padding_idx)}; });
  }
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_inputs("one_hot", {&indices});
  DP_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, DTypeError,
           "one_hot: one_hot is only applicable to index tensors (int64 or int32), got ", dtype_name(indices.dtype()));
  DP_CHECK(num_classes >= -1, ValueError, "one_hot: num_classes must be -1 (infer) or non-negative, got ", num_classes);
  // The values are needed on the host for the checks and to infer num_classes (on a device: a copy
  // and a wait; one_hot prepares labels, it is not in a training step's inner loop).
  std::vector<int64_t> v = read_index_values("one_hot", indices.is_cpu() ? indices : indices.cpu());
  for (int64_t x : v)
    DP_CHECK(x >= 0, IndexError, "one_hot: class value ", x, " is negative; class values must be in [0, num_classes",
             num_classes >= 0 ? detail::str(" = ", num_classes) : std::string(), ")");
  if (num_classes == -1) {
    DP_CHECK(!v.empty(), ValueError, "one_hot: Can not infer total number of classes from empty tensor.");
    num_classes = *std::max_element(v.begin(), v.end()) + 1;
  }
  for (int64_t x : v)
    DP_CHECK(x<num_classes, IndexError, "one_hot: class value ", x, " is out of range for num_classes ", num_classes, num_classes> 0
                 ? detail::str(" (valid range [0, ", num_classes - 1, "])")
                 : std::string(" (no class is valid)"));
  Shape out_shape = indices.sizes();
  out_shape.push_back(num_classes);
  Tensor out = raw_zeros(out_shape, kInt64, indices.device());
  backend::one_hot_kernel(indices.device().type, out, indices, v);
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, const Scalar& value) {
  check_inputs("masked_fill", {&a, &mask});
  DP_CHECK(mask.dtype() == kBool, DTypeError, "masked_fill: only supports boolean masks, but got mask with dtype ", dtype_name(mask.dtype()));
  Shape out_shape = broadcast_shapes(a.sizes(), mask.sizes(), "masked_fill");
  Tensor out = make_empty(out_shape, a.dtype(), a.device());
  backend::masked_fill_kernel(a.device().type, out, a, mask, value);
  if (autograd::needs_grad(a)) {
    SavedVariable sm(mask, false);
    Shape a_shape = a.sizes();
    autograd::record("MaskedFillBackward0", {a}, {out},
                     [sm, a_shape](variable_list&& g) { return variable_list{dp::sum_to(dp::masked_fill(g[0], sm.unpack(), 0), a_shape)}; });
  }
  return out;
}

}  // namespace dp
