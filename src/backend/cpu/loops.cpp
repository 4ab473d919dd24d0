#include "backend/cpu/loops.h"
#include <algorithm>
#include <numeric>

namespace dp::kernels {

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

void copy_kernel_cpu(const Tensor& dst, const Tensor& src) {
  ElementwiseIter it({&dst, &src}, dst.sizes());
  dispatch_all(dst.dtype(), "copy_", [&]<typename D>() {
    dispatch_all(src.dtype(), "copy_", [&]<typename S>() { cpu_kernel<D, S>(it, [](S v) { return convert<D>(v); }); });
  });
}

void fill_kernel_cpu(const Tensor& dst, const Scalar& value) {
  dispatch_all(dst.dtype(), "fill_", [&]<typename D>() {
    D v = value.is_floating_point() ? convert<D>(value.to_double()) : convert<D>(value.to_int());
    if (value.is_bool()) v = convert<D>(value.to_int() != 0);
    if (dst.is_contiguous()) {  // fresh tensors (zeros, ones, full): one plain loop, no iterator set-up
      if (dst.numel() > 0) std::fill_n(static_cast<D*>(dst.data_ptr()), dst.numel(), v);
      return;
    }
    ElementwiseIter it({&dst}, dst.sizes());
    cpu_kernel<D>(it, [v]() { return v; });
  });
}

}  // namespace dp::kernels
