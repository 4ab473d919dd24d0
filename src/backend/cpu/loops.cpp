#include "backend/cpu/loops.h"
#include <algorithm>
#include <cstring>
#include "backend/cpu/blas.h"
#include "backend/cpu/elementwise_loops.h"
#include "backend/elementwise_math.h"

namespace dp::backend::cpu {

void ElementwiseIter::init(const Tensor* const* operands, int n, IntArrayRef shape) {
  nt_ = n;
  DP_CHECK(nt_ >= 1 && nt_ <= kMaxOperands, ValueError, "ElementwiseIter: 1 to ", kMaxOperands, " operands supported, got ", nt_);
  const int nd = static_cast<int>(shape.size());
  numel_ = numel_of(shape);
  // Byte strides of each operand in the iteration shape (0 where broadcast).
  std::array<SmallVector<int64_t, 6>, kMaxOperands> st;
  for (int k = 0; k < nt_; ++k) {
    const Tensor& t = *operands[k];
    const int td = static_cast<int>(t.dim());
    DP_CHECK(td <= nd, ShapeError, "ElementwiseIter: operand ", k, " has shape ", t.size_str(), " which does not broadcast to ", shape_str(shape));
    st[k].assign(nd, 0);
    const int64_t es = static_cast<int64_t>(t.element_size());
    for (int d = 0; d < td; ++d) {
      int64_t sz = t.sizes()[d];
      int od = d + nd - td;
      DP_CHECK(sz == shape[od] || sz == 1, ShapeError, "ElementwiseIter: operand ", k, " has shape ", t.size_str(), " which does not broadcast to ",
               shape_str(shape));
      st[k][od] = (sz == 1 && shape[od] != 1) ? 0 : t.strides()[d] * es;
    }
    base_[k] = static_cast<char*>(t.data_ptr());
  }
  // Drop size-1 dims, then merge neighbours d, d+1 when stride[d] == stride[d+1] * size[d+1] for
  // every operand (they then walk memory as one dimension).
  SmallVector<int64_t, 6> sh;
  std::array<SmallVector<int64_t, 6>, kMaxOperands> cs;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    if (!sh.empty()) {
      bool mergeable = true;
      for (int k = 0; k < nt_ && mergeable; ++k) mergeable = cs[k].back() == st[k][d] * shape[d];
      if (mergeable) {
        sh.back() *= shape[d];
        for (int k = 0; k < nt_; ++k) cs[k].back() = st[k][d];
        continue;
      }
    }
    sh.push_back(shape[d]);
    for (int k = 0; k < nt_; ++k) cs[k].push_back(st[k][d]);
  }
  shape_ = sh;
  for (int k = 0; k < nt_; ++k) strides_[k] = cs[k];
}

namespace {

template <typename T>
inline constexpr bool is_any_float_v = std::is_floating_point_v<T> || is_reduced_float_v<T>;

// dst and src contiguous with the same element count (a fresh copy, a dtype conversion such as
// autocast's casts of parameters and their gradients' casts back): one vectorised pass, in pieces
// over the host's threads when large (blas::parallel_range). Returns false for other layouts.
bool copy_dense(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0 || src.numel() != n || !dst.is_contiguous() || !src.is_contiguous()) return false;
  if (dst.dtype() == src.dtype()) {
    const size_t es = dst.element_size();
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    if (d == s) return true;
    blas::parallel_range(n, [&](int64_t b, int64_t e) { std::memmove(d + b * es, s + b * es, static_cast<size_t>(e - b) * es); });
    return true;
  }
  bool done = false;
  dispatch_all(dst.dtype(), "copy_", [&]<typename D>() {
    dispatch_all(src.dtype(), "copy_", [&]<typename S>() {
      if constexpr (is_any_float_v<D> && is_any_float_v<S>) {
        D* d = static_cast<D*>(dst.data_ptr());
        const S* s = static_cast<const S*>(src.data_ptr());
        blas::parallel_range(n, [&](int64_t b, int64_t e) {
          dense_loop(
              d + b, e - b, [](S v) { return convert<D>(v); }, s + b);
        });
        done = true;
      }
    });
  });
  return done;
}

// float16 -> float32 (autocast's casts back, type promotion of mixed operands) in the element-wise
// launch, any layouts, with the one-instruction conversion of elementwise_math.h's om (F16C): the
// portable conversion branches per element and is 3-5x slower. The other direction and the
// bfloat16 pairs take the general copy, where the compiler vectorises the portable rounding
// (measured faster than the one-element F16C instruction). False for other pairs.
bool convert_half_to_float(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() != kFloat32 || src.dtype() != kFloat16) return false;
  launch<float, Half>(
      dst, [](Half v) { return om(v); }, src);
  return true;
}

template <typename T>
bool all_zero_bits(const T& v) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, static_cast<const void*>(&v), sizeof(T));
  for (unsigned char b : bytes)
    if (b != 0) return false;
  return true;
}

}  // namespace

void copy_kernel(const Tensor& dst, const Tensor& src) {
  if (convert_half_to_float(dst, src)) return;
  if (copy_dense(dst, src)) return;
  ElementwiseIter it({&dst, &src}, dst.sizes());
  dispatch_all(dst.dtype(), "copy_", [&]<typename D>() {
    dispatch_all(src.dtype(), "copy_", [&]<typename S>() { cpu_kernel<D, S>(it, [](S v) { return convert<D>(v); }); });
  });
}

void fill_kernel(const Tensor& dst, const Scalar& value) {
  dispatch_all(dst.dtype(), "fill_", [&]<typename D>() {
    D v = value.is_floating_point() ? convert<D>(value.to_double()) : convert<D>(value.to_int());
    if (value.is_bool()) v = convert<D>(value.to_int() != 0);
    if (dst.is_contiguous()) {  // fresh tensors (zeros, ones, full): one plain loop, no iterator set-up
      D* d = static_cast<D*>(dst.data_ptr());
      if (dst.numel() == 0) return;
      if (all_zero_bits(v)) {  // zeros, zero_: a memset
        blas::parallel_range(dst.numel(),
                             [&](int64_t b, int64_t e) { std::memset(static_cast<void*>(d + b), 0, static_cast<size_t>(e - b) * sizeof(D)); });
        return;
      }
      blas::parallel_range(dst.numel(), [&](int64_t b, int64_t e) { std::fill_n(d + b, e - b, v); });
      return;
    }
    ElementwiseIter it({&dst}, dst.sizes());
    cpu_kernel<D>(it, [v]() { return v; });
  });
}

void arange_kernel(const Tensor& out, const Scalar& start, const Scalar& step) {
  const int64_t n = out.numel();
  dispatch_all(out.dtype(), "arange", [&]<typename T>() {
    T* p = n ? out.data_ptr<T>() : nullptr;
    if constexpr (std::is_integral_v<T>) {
      const uint64_t xs = static_cast<uint64_t>(start.to_int()), xst = static_cast<uint64_t>(step.to_int());
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<int64_t>(xs + xst * static_cast<uint64_t>(i)));
    } else {
      const double ds = start.to_double(), dst = step.to_double();
      for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(ds + dst * static_cast<double>(i));
    }
  });
}

void linspace_kernel(const Tensor& out, double start, double end) {
  const int64_t n = out.numel();
  dispatch_all(out.dtype(), "linspace", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    const backend::Linspace<T> f(start, end, n);
    for (int64_t i = 0; i < n; ++i) p[i] = f(i);
  });
}

}  // namespace dp::backend::cpu
