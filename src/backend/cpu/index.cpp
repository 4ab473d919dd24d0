// The CPU backend's index kernels (index_kernels.h). Every index is read and bounds-checked on the
// host before anything is written. Accumulating kernels (scatter_add, index_add) run serially, so
// repeated indices add up exactly. Rows that are contiguous are moved with memcpy / a plain loop.
#include <cstring>
#include <type_traits>
#include <vector>
#include "backend/dispatch_width.h"
#include "backend/index_kernels.h"
#include "backend/dispatch.h"
#include "backend/cpu/loops.h"
#include "dp/core/pooled.h"

namespace dp::backend::cpu {
namespace {

Tensor raw_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}

// t with dimension `dim` fixed at `i` (a view).
Tensor raw_select(const Tensor& t, int64_t dim, int64_t i) {
  Shape sz = t.sizes(), st = t.strides();
  const int64_t off = t.storage_offset() + i * st[dim];
  sz.erase(sz.begin() + dim);
  st.erase(st.begin() + dim);
  return raw_view(t, std::move(sz), std::move(st), off);
}

template <typename T>
inline T add_values(T x, T y) {
  if constexpr (std::is_same_v<T, bool>)
    return x || y;
  else if constexpr (backend::is_reduced_float_v<T>)
    return T(static_cast<float>(x) + static_cast<float>(y));
  else if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(x)) + static_cast<uint64_t>(static_cast<int64_t>(y)));
  else
    return x + y;
}

template <typename T>
T scalar_to(const Scalar& s) {
  if (s.is_floating_point()) return backend::convert<T>(s.to_double());
  if (s.is_bool()) return backend::convert<T>(s.to<bool>());
  return backend::convert<T>(s.to_int());
}

// check: the CPU reads every index anyway.
void index_select_kernel(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool /*check*/) {
  const std::vector<int64_t> idx = read_indices(op, index, dim, a.size(dim));
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
  for (int64_t j = 0; j < n; ++j)
    backend::copy_kernel(backend::copy_device_type((raw_select(out, dim, j)), (raw_select(a, dim, idx[j]))), raw_select(out, dim, j),
                         raw_select(a, dim, idx[j]));
}

void index_add_kernel(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool /*check*/) {
  const std::vector<int64_t> idx = read_indices(op, index, dim, self.size(dim));
  if (src.numel() == 0) return;
  const int64_t n = static_cast<int64_t>(idx.size()), S = self.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= self.size(d);
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  backend::dispatch_all(self.dtype(), "index_add", [&]<typename T>() {
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
      backend::cpu::ElementwiseIter it({&d, &d, &s}, d.sizes());
      backend::cpu::cpu_kernel<T, T, T>(it, [](T x, T y) { return add_values(x, y); });
    }
  });
}

void gather_kernel(const char* op, const Tensor& out, const Tensor& a, int64_t dim, const Tensor& index, bool /*check*/) {
  const std::vector<int64_t> idx = read_indices(op, index, dim, a.size(dim));
  Shape a_st = a.strides();
  const int64_t step = a_st[dim];
  a_st[dim] = 0;
  ::dp::backend::dispatch_width(a.element_size(), [&]<typename W>() {
    const W* pa = static_cast<const W*>(a.data_ptr());
    W* po = static_cast<W*>(out.data_ptr());
    strided_walk<2>(index.sizes(), {out.strides(), a_st},
                    [&](int64_t i, const std::array<int64_t, 2>& off) { po[off[0]] = pa[off[1] + idx[i] * step]; });
  });
}

void scatter_add_kernel(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool /*check*/) {
  const std::vector<int64_t> idx = read_indices(op, index, dim, self.size(dim));
  Shape s_st = self.strides();
  const int64_t step = s_st[dim];
  s_st[dim] = 0;
  backend::dispatch_all(self.dtype(), op, [&]<typename T>() {
    T* ps = static_cast<T*>(self.data_ptr());
    const T* pr = static_cast<const T*>(src.data_ptr());
    strided_walk<2>(index.sizes(), {s_st, src.strides()}, [&](int64_t i, const std::array<int64_t, 2>& off) {
      T& d = ps[off[0] + idx[i] * step];
      d = add_values(d, pr[off[1]]);
    });
  });
}

// The CPU kernels above read and check every index before they write.
void check_indices_kernel(const char*, const Tensor&, int64_t, int64_t) {}

void embedding_forward_kernel(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  const int64_t V = weight.size(0), D = weight.size(1);
  std::vector<int64_t> idx = read_indices("embedding", indices, 0, V);
  const int64_t N = static_cast<int64_t>(idx.size());
  if (out.numel() == 0) return;
  if (D <= 1 || weight.stride(1) == 1) {  // contiguous rows: one memcpy each
    const size_t es = weight.element_size(), row = static_cast<size_t>(D) * es;
    const int64_t rs = weight.stride(0);
    const char* src = static_cast<const char*>(weight.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t i = 0; i < N; ++i) std::memcpy(dst + i * row, src + idx[i] * rs * static_cast<int64_t>(es), row);
  } else {
    Tensor out2 = raw_view(out, {N, D}, {D, 1}, 0);
    for (int64_t i = 0; i < N; ++i)
      backend::copy_kernel(backend::copy_device_type((raw_select(out2, 0, i)), (raw_select(weight, 0, idx[i]))), raw_select(out2, 0, i),
                           raw_select(weight, 0, idx[i]));
  }
}

void one_hot_kernel(const Tensor& out, const Tensor& /*indices*/, const std::vector<int64_t>& v) {
  const int64_t num_classes = out.size(-1);
  int64_t* p = static_cast<int64_t*>(out.data_ptr());
  for (size_t i = 0; i < v.size(); ++i) p[static_cast<int64_t>(i) * num_classes + v[i]] = 1;
}

void masked_fill_kernel(const Tensor& out, const Tensor& a, const Tensor& mask, const Scalar& value) {
  // In place (masked_fill_: out is a) there is nothing to copy.
  const bool in_place = out.data_ptr() == a.data_ptr() && out.sizes() == a.sizes() && out.strides() == a.strides() && out.dtype() == a.dtype();
  if (!in_place) backend::copy_kernel(backend::copy_device_type(out, a), out, a);
  backend::cpu::ElementwiseIter it({&out, &out, &mask}, out.sizes());
  backend::dispatch_all(a.dtype(), "masked_fill", [&]<typename T>() {
    const T v = scalar_to<T>(value);
    backend::cpu::cpu_kernel<T, T, bool>(it, [v](T x, bool m) { return m ? v : x; });
  });
}

}  // namespace

void register_index_kernels() {
  DP_REGISTER_KERNEL(CPU, index_select_kernel);
  DP_REGISTER_KERNEL(CPU, index_add_kernel);
  DP_REGISTER_KERNEL(CPU, gather_kernel);
  DP_REGISTER_KERNEL(CPU, scatter_add_kernel);
  DP_REGISTER_KERNEL(CPU, check_indices_kernel);
  DP_REGISTER_KERNEL(CPU, embedding_forward_kernel);
  DP_REGISTER_KERNEL(CPU, one_hot_kernel);
  DP_REGISTER_KERNEL(CPU, masked_fill_kernel);
}

}  // namespace dp::backend::cpu
