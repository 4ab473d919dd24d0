// Indexing ops: index_select, gather, scatter_add(_), index_add(_), embedding, one_hot, masked_fill.
//
// Every index is read and bounds-checked before anything is written, so an out-of-range index is
// an IndexError naming the op, the value and the valid range, and never a partial write or a
// crash. Accumulating ops (scatter_add, index_add, embedding's backward) run serially, so repeated
// indices add up exactly. Rows that are contiguous are moved with memcpy / a plain loop.
//
// On a CUDA device the same ops run as two kernels (cuda/index.h): a gather over an iteration shape
// (index_select, gather, embedding) and an atomic scatter-add (index_add, scatter_add, embedding's
// backward, one_hot), given views of the operands with that shape (the indexed dim at stride 0 in
// the indexed tensor, index values times its stride added by the kernel). Indices are checked by
// the kernels; a bad one is reported after the op's stream has caught up (the wait cuda/index.h
// explains) and turned into the CPU's IndexError by re-reading the indices on the host. In-place
// ops check before they write; backward passes reuse checked indices and do not wait.
#include "dp/core/pooled.h"
#include "dp/ops/index.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "core/kernels/dispatch.h"
#include "core/kernels/loops.h"
#include "core/kernels/reduce.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/common.h"
#include "ops/index_plan.h"
#if DP_HAVE_CUDA
#include "cuda/index.h"
#endif

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
  kernels::copy_kernel(c, t);
  return c;
}

Tensor raw_zeros(IntArrayRef sizes, DType dt, Device dev) {
  Tensor z = make_empty(sizes, dt, dev);
  kernels::fill_kernel(z, 0);
  return z;
}

// A 0-dim tensor seen as [1] (kernels index a dimension).
Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? raw_view(t, {1}, {1}, t.storage_offset()) : t; }

// t with dimension `dim` fixed at `i` (a view).
Tensor raw_select(const Tensor& t, int64_t dim, int64_t i) {
  Shape sz = t.sizes(), st = t.strides();
  const int64_t off = t.storage_offset() + i * st[dim];
  sz.erase(sz.begin() + dim);
  st.erase(st.begin() + dim);
  return raw_view(t, std::move(sz), std::move(st), off);
}

int64_t size_at(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.sizes()[d]; }

void check_inputs(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) ops::check_defined(op, *t);
  ops::check_same_device(op, ts);
}

void check_index_dtype(const char* op, const Tensor& index) {
  DP_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, DTypeError, op, ": expected an int64 or int32 index tensor, got ",
           dtype_name(index.dtype()), " ", index.size_str());
}

// Walks the positions of `sizes` in row-major order keeping one element offset per operand;
// f(i, offsets) gets the linear position i.
template <size_t N, typename F>
void strided_walk(IntArrayRef sizes, const std::array<Shape, N>& strides, F&& f) {
  const int64_t total = numel_of(sizes);
  if (total == 0) return;
  const int nd = static_cast<int>(sizes.size());
  std::vector<int64_t> idx(nd, 0);
  std::array<int64_t, N> off{};
  for (int64_t i = 0; i < total; ++i) {
    f(i, off);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < sizes[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * (sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

// The index values in row-major order of `index` (any layout), unchecked.
std::vector<int64_t> read_index_values(const char* op, const Tensor& index) {
  std::vector<int64_t> out(index.numel());
  kernels::dispatch_index(index.dtype(), op, [&]<typename I>() {
    const I* p = static_cast<const I*>(index.data_ptr());
    strided_walk<1>(index.sizes(), {index.strides()}, [&](int64_t i, const std::array<int64_t, 1>& off) { out[i] = static_cast<int64_t>(p[off[0]]); });
  });
  return out;
}

[[noreturn]] void index_out_of_range(const char* op, int64_t v, int64_t dim, int64_t size) {
  throw IndexError(detail::str(op, ": index ", v, " is out of bounds for dimension ", dim, " with size ", size,
                               size > 0 ? detail::str(" (valid range [0, ", size - 1, "])") : std::string(" (the dimension is empty: no index is valid)")));
}

// Index values, each checked to lie in [0, size).
std::vector<int64_t> read_indices(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  std::vector<int64_t> v = read_index_values(op, index);
  for (int64_t x : v)
    if (x < 0 || x >= size) index_out_of_range(op, x, dim, size);
  return v;
}

// ---------------------------------------------------------------------------------------------
// CUDA: the kernels of cuda/index.h run on the views of ops/index_plan.h; their error path.

#if DP_HAVE_CUDA
// A kernel met an index outside [0, size): the CPU's message, from the indices read on the host.
[[noreturn]] void throw_cuda_bad_index(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  read_indices(op, index.cpu(), dim, size);
  throw IndexError(detail::str(op, ": an index is out of bounds for dimension ", dim, " with size ", size));
}

// Checks every index of a CUDA `index` before an in-place op writes anything (as on the CPU, a bad
// index must leave self untouched).
void precheck_cuda(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  if (cuda::index_out_of_range(kernels::contiguous_nograd(index), size)) throw_cuda_bad_index(op, index, dim, size);
}

// cuda::index_gather / index_scatter_add on a plan; with check, a bad value of `index` (the op's
// index tensor, dim `dim`) is the CPU's IndexError, also when the plan is empty but `index` is not
// (the CPU checks every index).
void cuda_gather(const char* op, const index_plan::IndexKernelPlan& p, const Tensor& index, int64_t dim, bool check) {
  if (p.it.numel() == 0) {
    if (check) precheck_cuda(op, index, dim, p.bound);
    return;
  }
  if (cuda::index_gather(p.it, p.src, p.index, p.step, p.bound, check)) throw_cuda_bad_index(op, index, dim, p.bound);
}

void cuda_scatter_add(const char* op, const index_plan::IndexKernelPlan& p, const Tensor& index, int64_t dim, bool check) {
  if (p.it.numel() == 0) {
    if (check) precheck_cuda(op, index, dim, p.bound);
    return;
  }
  if (cuda::index_scatter_add(p.it, p.src, p.index, p.step, p.bound, p.skip, check)) throw_cuda_bad_index(op, index, dim, p.bound);
}
#endif

template <typename T>
inline T add_values(T x, T y) {
  if constexpr (std::is_same_v<T, bool>) return x || y;
  else if constexpr (kernels::is_reduced_float_v<T>) return T(static_cast<float>(x) + static_cast<float>(y));
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(x)) + static_cast<uint64_t>(static_cast<int64_t>(y)));
  else return x + y;
}

template <typename T>
T scalar_to(const Scalar& s) {
  if (s.is_floating_point()) return kernels::convert<T>(s.to_double());
  if (s.is_bool()) return kernels::convert<T>(s.to<bool>());
  return kernels::convert<T>(s.to_int());
}

// Copies by element width (the ops that only move elements work for every dtype).
template <typename F>
void dispatch_width(size_t width, F&& f) {
  switch (width) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    default: f.template operator()<uint64_t>(); return;
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels.

// out (contiguous, out.size(dim) == idx.size()) = a with dimension `dim` picked by idx.
void index_select_kernel(const Tensor& out, const Tensor& a, int64_t dim, const std::vector<int64_t>& idx) {
  if (out.numel() == 0) return;
  const int64_t n = static_cast<int64_t>(idx.size()), S = a.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= a.size(d);
  for (int64_t d = dim + 1; d < a.dim(); ++d) inner *= a.size(d);
  if (a.is_contiguous()) {
    const size_t es = a.element_size(), row = static_cast<size_t>(inner) * es;
    const char* src = static_cast<const char*>(a.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n; ++j) std::memcpy(dst + (o * n + j) * row, src + (o * S + idx[j]) * row, row);
    return;
  }
  for (int64_t j = 0; j < n; ++j) kernels::copy_kernel(raw_select(out, dim, j), raw_select(a, dim, idx[j]));
}

// out (contiguous, out.size(dim) == index.numel(); a.dim() >= 1) = a picked along dim by index.
void index_select_into(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool check) {
#if DP_HAVE_CUDA
  if (a.is_cuda()) {
    return cuda_gather(op, index_plan::index_select(out, a, dim, index), index, dim, check);
  }
#endif
  (void)check;  // the CPU reads every index anyway
  index_select_kernel(out, a, dim, read_indices(op, index, dim, a.size(dim)));
}

// self[..., idx[j], ...] += src[..., j, ...] along dim, serially.
void index_add_kernel(const Tensor& self, int64_t dim, const std::vector<int64_t>& idx, const Tensor& src) {
  if (src.numel() == 0) return;
  const int64_t n = static_cast<int64_t>(idx.size()), S = self.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= self.size(d);
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  kernels::dispatch_all(self.dtype(), "index_add", [&]<typename T>() {
    if (self.is_contiguous() && src.is_contiguous()) {
      T* ps = static_cast<T*>(self.data_ptr());
      const T* pr = static_cast<const T*>(src.data_ptr());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n; ++j) {
          T* d = ps + (o * S + idx[j]) * inner;
          const T* s = pr + (o * n + j) * inner;
          for (int64_t t = 0; t < inner; ++t) d[t] = add_values(d[t], s[t]);
        }
      return;
    }
    for (int64_t j = 0; j < n; ++j) {
      Tensor d = raw_select(self, dim, idx[j]), s = raw_select(src, dim, j);
      kernels::ElementwiseIter it({&d, &d, &s}, d.sizes());
      kernels::cpu_kernel<T, T, T>(it, [](T x, T y) { return add_values(x, y); });
    }
  });
}

// self (0-dim seen as [1]) [..., index[j], ...] += src[..., j, ...] along dim. In-place callers on
// CUDA check the indices first (precheck_cuda) and pass check = false.
void index_add_into(const char* op, const Tensor& self_in, int64_t dim, const Tensor& index, const Tensor& src_in, bool check) {
  const Tensor self = as_1d(self_in), src = as_1d(src_in);
#if DP_HAVE_CUDA
  if (self.is_cuda()) {
    return cuda_scatter_add(op, index_plan::index_add(self, dim, index, src), index, dim, check);
  }
#endif
  (void)check;
  index_add_kernel(self, dim, read_indices(op, index, dim, self.size(dim)), src);
}

// Checks done by the callers: index.dim() == a.dim(), index.size(d) <= a.size(d) for d != dim,
// index.size(d) <= out_shape[d]. out[p] = a[p with dim := index[p]] for p in index's extent;
// zeros elsewhere in out_shape. check = false: the indices were checked before (backward).
Tensor gather_kernel(const char* op, const Tensor& a_in, int64_t dim, const Tensor& index_in, IntArrayRef out_shape, bool check) {
  const Tensor a = as_1d(a_in), index = as_1d(index_in);
  Tensor out = make_empty(out_shape, a.dtype(), a.device());
  if (!IntArrayRef(index_in.sizes()).equals(out_shape)) kernels::fill_kernel(out, 0);
  const Tensor o1 = as_1d(out);
#if DP_HAVE_CUDA
  if (a.is_cuda()) {
    cuda_gather(op, index_plan::gather(o1, a, dim, index), index, dim, check);
    return out;
  }
#endif
  std::vector<int64_t> idx = read_indices(op, index, dim, a.size(dim));
  Shape a_st = a.strides();
  const int64_t step = a_st[dim];
  a_st[dim] = 0;
  dispatch_width(a.element_size(), [&]<typename W>() {
    const W* pa = static_cast<const W*>(a.data_ptr());
    W* po = static_cast<W*>(o1.data_ptr());
    strided_walk<2>(index.sizes(), {o1.strides(), a_st}, [&](int64_t i, const std::array<int64_t, 2>& off) { po[off[0]] = pa[off[1] + idx[i] * step]; });
  });
  return out;
}

// self[p with dim := index[p]] += src[p] for p in index's extent, serially (atomics on CUDA).
void scatter_add_kernel(const char* op, const Tensor& self_in, int64_t dim, const Tensor& index_in, const Tensor& src_in, bool check) {
  const Tensor self = as_1d(self_in), index = as_1d(index_in), src = as_1d(src_in);
#if DP_HAVE_CUDA
  if (self.is_cuda()) {
    return cuda_scatter_add(op, index_plan::scatter_add(self, dim, index, src), index, dim, check);
  }
#endif
  (void)check;
  std::vector<int64_t> idx = read_indices(op, index, dim, self.size(dim));
  Shape s_st = self.strides();
  const int64_t step = s_st[dim];
  s_st[dim] = 0;
  kernels::dispatch_all(self.dtype(), op, [&]<typename T>() {
    T* ps = static_cast<T*>(self.data_ptr());
    const T* pr = static_cast<const T*>(src.data_ptr());
    strided_walk<2>(index.sizes(), {s_st, src.strides()}, [&](int64_t i, const std::array<int64_t, 2>& off) {
      T& d = ps[off[0] + idx[i] * step];
      d = add_values(d, pr[off[1]]);
    });
  });
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

// Flattened copy of an index tensor: int64 on the host; on CUDA a contiguous [N] view (int32 or
// int64, both fine for index_add) without reading the values.
Tensor flat_index(const Tensor& indices) {
  if (indices.is_cuda()) {
    const Tensor c = kernels::contiguous_nograd(indices);
    return raw_view(c, {c.numel()}, {1}, c.storage_offset());
  }
  std::vector<int64_t> v = read_index_values("embedding", indices);
  Tensor t = make_empty({static_cast<int64_t>(v.size())}, kInt64, indices.device());
  if (!v.empty()) std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

// Dense gradient of embedding w.r.t. weight [num_weights, D]: rows of g added at their indices,
// serially (repeated indices add up); the padding row gets nothing. Written with dp ops, so it
// is differentiable w.r.t. g. On CUDA without grad mode (the usual backward) it is one atomic
// scatter-add kernel that skips the padding index (float sums in an unspecified order, as
// PyTorch's index_add; PyTorch's embedding backward sorts the indices to be deterministic).
Tensor embedding_dense_backward(const Tensor& g, const Tensor& indices, int64_t num_weights, int64_t padding_idx) {
  const int64_t D = g.size(-1), N = indices.numel();
#if DP_HAVE_CUDA
  if (g.is_cuda() && !GradMode::is_enabled()) {
    Tensor gw = raw_zeros({num_weights, D}, g.dtype(), g.device());
    cuda_scatter_add("embedding backward", index_plan::embedding_backward(gw, g, indices, padding_idx), indices, 0, false);
    return gw;
  }
#endif
  Tensor g2 = dp::reshape(g, {N, D});
  Tensor idx = flat_index(indices);
  if (padding_idx >= 0) {
    Tensor mask;
    if (idx.is_cuda()) {
      mask = dp::reshape(dp::eq(idx, padding_idx), {N, 1});
    } else {
      mask = make_empty({N, 1}, kBool, g.device());
      bool* pm = static_cast<bool*>(mask.data_ptr());
      const int64_t* pi = static_cast<const int64_t*>(idx.data_ptr());
      for (int64_t i = 0; i < N; ++i) pm[i] = pi[i] == padding_idx;
    }
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
    // Only index 0 exists; the CPU checks the values first, then their count.
    if (a.is_cuda()) {
      DP_CHECK(index.numel() == 1, IndexError, "index_select: Index to scalar can have only 1 value, got ", index.numel(), " value(s)");
      out = make_empty({}, a.dtype(), a.device());
      index_select_into("index_select", raw_view(out, {1}, {1}, 0), as_1d(a), 0, index, check);
    } else {
      std::vector<int64_t> idx = read_indices("index_select", index, dim, 1);
      DP_CHECK(idx.size() == 1, IndexError, "index_select: Index to scalar can have only 1 value, got ", idx.size(), " value(s)");
      out = raw_copy(a);
    }
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
    DP_CHECK(d == dim || index.size(d) <= a.size(d), ShapeError, "gather: Size does not match at dimension ", d, " expected index ",
             index.size_str(), " to be smaller than self ", a.size_str(), " apart from dimension ", dim);
  Tensor out = gather_kernel("gather", a, dim, index, index.sizes(), true);
  record_gather(out, a, dim, index);
  return out;
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) { return scatter_add_op(a, dim, index, src, true); }

Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  dim = check_scatter("scatter_add_", self, dim, index, src);
  autograd::check_inplace(self, "scatter_add_");
  const bool ga = autograd::needs_grad(self), gs = autograd::needs_grad(src);
#if DP_HAVE_CUDA
  if (self.is_cuda()) precheck_cuda("scatter_add_", index, dim, size_at(self, dim));
#endif
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
#if DP_HAVE_CUDA
  if (self.is_cuda()) precheck_cuda("index_add_", index, dim, size_at(self, dim));
#endif
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
#if DP_HAVE_CUDA
  if (weight.is_cuda()) {
    cuda_gather("embedding", index_plan::embedding(out, weight, indices), indices, 0, true);
  } else
#endif
  {
    std::vector<int64_t> idx = read_indices("embedding", indices, 0, V);
    const int64_t N = static_cast<int64_t>(idx.size());
    if (out.numel() > 0) {
      if (D <= 1 || weight.stride(1) == 1) {  // contiguous rows: one memcpy each
        const size_t es = weight.element_size(), row = static_cast<size_t>(D) * es;
        const int64_t rs = weight.stride(0);
        const char* src = static_cast<const char*>(weight.data_ptr());
        char* dst = static_cast<char*>(out.data_ptr());
        for (int64_t i = 0; i < N; ++i) std::memcpy(dst + i * row, src + idx[i] * rs * static_cast<int64_t>(es), row);
      } else {
        Tensor out2 = raw_view(out, {N, D}, {D, 1}, 0);
        for (int64_t i = 0; i < N; ++i) kernels::copy_kernel(raw_select(out2, 0, i), raw_select(weight, 0, idx[i]));
      }
    }
  }
  if (autograd::needs_grad(weight)) {
    SavedVariable si(indices, false);
    autograd::record("EmbeddingBackward0", {weight}, {out}, [si, V, padding_idx](variable_list&& g) {
      return variable_list{embedding_dense_backward(g[0], si.unpack(), V, padding_idx)};
    });
  }
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_inputs("one_hot", {&indices});
  DP_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, DTypeError, "one_hot: one_hot is only applicable to index tensors (int64 or int32), got ",
           dtype_name(indices.dtype()));
  DP_CHECK(num_classes >= -1, ValueError, "one_hot: num_classes must be -1 (infer) or non-negative, got ", num_classes);
  // The values are needed on the host for the checks and to infer num_classes (on CUDA: a copy and
  // a wait; one_hot prepares labels, it is not in a training step's inner loop).
  std::vector<int64_t> v = read_index_values("one_hot", indices.is_cuda() ? indices.cpu() : indices);
  for (int64_t x : v)
    DP_CHECK(x >= 0, IndexError, "one_hot: class value ", x, " is negative; class values must be in [0, num_classes",
             num_classes >= 0 ? detail::str(" = ", num_classes) : std::string(), ")");
  if (num_classes == -1) {
    DP_CHECK(!v.empty(), ValueError, "one_hot: Can not infer total number of classes from empty tensor.");
    num_classes = *std::max_element(v.begin(), v.end()) + 1;
  }
  for (int64_t x : v)
    DP_CHECK(x < num_classes, IndexError, "one_hot: class value ", x, " is out of range for num_classes ", num_classes,
             num_classes > 0 ? detail::str(" (valid range [0, ", num_classes - 1, "])") : std::string(" (no class is valid)"));
  Shape out_shape = indices.sizes();
  out_shape.push_back(num_classes);
  Tensor out = raw_zeros(out_shape, kInt64, indices.device());
#if DP_HAVE_CUDA
  if (indices.is_cuda()) {
    // A one scattered at each class position (the values were checked above).
    Tensor one = make_empty({}, kInt64, indices.device());
    kernels::fill_kernel(one, 1);
    cuda_scatter_add("one_hot", index_plan::one_hot(out, one, indices), indices, indices.dim(), false);
    return out;
  }
#endif
  int64_t* p = static_cast<int64_t*>(out.data_ptr());
  for (size_t i = 0; i < v.size(); ++i) p[static_cast<int64_t>(i) * num_classes + v[i]] = 1;
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, const Scalar& value) {
  check_inputs("masked_fill", {&a, &mask});
  DP_CHECK(mask.dtype() == kBool, DTypeError, "masked_fill: only supports boolean masks, but got mask with dtype ", dtype_name(mask.dtype()));
  Shape out_shape = broadcast_shapes(a.sizes(), mask.sizes(), "masked_fill");
  Tensor out = make_empty(out_shape, a.dtype(), a.device());
#if DP_HAVE_CUDA
  if (a.is_cuda()) {
    cuda::masked_fill(out, a, mask, value);
  } else
#endif
  {
    kernels::copy_kernel(out, a);
    kernels::ElementwiseIter it({&out, &out, &mask}, out_shape);
    kernels::dispatch_all(a.dtype(), "masked_fill", [&]<typename T>() {
      const T v = scalar_to<T>(value);
      kernels::cpu_kernel<T, T, bool>(it, [v](T x, bool m) { return m ? v : x; });
    });
  }
  if (autograd::needs_grad(a)) {
    SavedVariable sm(mask, false);
    Shape a_shape = a.sizes();
    autograd::record("MaskedFillBackward0", {a}, {out}, [sm, a_shape](variable_list&& g) {
      return variable_list{dp::sum_to(dp::masked_fill(g[0], sm.unpack(), 0), a_shape)};
    });
  }
  return out;
}

}  // namespace dp
