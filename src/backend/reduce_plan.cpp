// Reduction plans and the shape side of a reduction (reduce_plan.h).
#include "backend/reduce_plan.h"
#include <algorithm>

namespace dp::backend {

ReducePlan make_reduce_plan(IntArrayRef in_sizes, IntArrayRef in_strides, const std::vector<bool>& reduced, IntArrayRef out_strides, bool reorder) {
  struct Dim {
    int64_t size, in, out;
  };
  std::vector<Dim> ks, rs;
  ReducePlan p;
  const size_t nd = in_sizes.size();
  for (size_t d = 0; d < nd; ++d) {
    const int64_t sz = in_sizes[d];
    if (reduced[d]) {
      p.red_numel *= sz;
      if (sz != 1) rs.push_back({sz, in_strides[d], 0});
    } else {
      p.out_numel *= sz;
      if (sz != 1) ks.push_back({sz, in_strides[d], out_strides[d]});
    }
  }
  if (reorder) {
    // Decreasing input stride, so the contiguous dim (if any) comes innermost; broadcast (stride 0)
    // dims go outermost, where they cost nothing.
    auto key = [](const Dim& a) { return a.in == 0 ? std::numeric_limits<int64_t>::max() : std::abs(a.in); };
    auto cmp = [&](const Dim& a, const Dim& b) { return key(a) > key(b); };
    std::stable_sort(rs.begin(), rs.end(), cmp);
    std::stable_sort(ks.begin(), ks.end(), cmp);
  }
  // Merge neighbours that walk memory as one dim.
  auto coalesce = [](std::vector<Dim>& v, bool with_out) {
    std::vector<Dim> r;
    for (const Dim& d : v) {
      if (!r.empty()) {
        Dim& b = r.back();
        if (b.in == d.in * d.size && (!with_out || b.out == d.out * d.size)) {
          b.size *= d.size;
          b.in = d.in;
          b.out = d.out;
          continue;
        }
      }
      r.push_back(d);
    }
    v = std::move(r);
  };
  coalesce(rs, false);
  coalesce(ks, true);
  for (const Dim& d : ks) {
    p.ksize.push_back(d.size);
    p.kin.push_back(d.in);
    p.kout.push_back(d.out);
  }
  for (const Dim& d : rs) {
    p.rsize.push_back(d.size);
    p.rin.push_back(d.in);
  }
  return p;
}

ReducePlan make_reduce_plan(const Tensor& out, const Tensor& in, const std::vector<bool>& reduced, bool keepdim, bool reorder) {
  const int64_t nd = in.dim();
  std::vector<int64_t> ost(static_cast<size_t>(nd), 0);
  int64_t k = 0;
  for (int64_t d = 0; d < nd; ++d) {
    if (keepdim)
      ost[d] = out.strides()[d];
    else if (!reduced[d])
      ost[d] = out.strides()[k++];
  }
  return make_reduce_plan(in.sizes(), in.strides(), reduced, ost, reorder);
}

std::vector<bool> make_dim_mask(IntArrayRef dims, int64_t ndim, const char* op) {
  std::vector<bool> mask(static_cast<size_t>(ndim), dims.empty());
  bool seen_scalar_dim = false;  // a 0-dim tensor accepts dim 0 / -1 and has nothing to reduce
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op);
    const bool repeated = ndim == 0 ? seen_scalar_dim : static_cast<bool>(mask[w]);
    DP_CHECK(!repeated, IndexError, op, ": dim ", w, " appears multiple times in the list of dims");
    if (ndim == 0)
      seen_scalar_dim = true;
    else
      mask[w] = true;
  }
  return mask;
}

Shape reduced_shape(IntArrayRef sizes, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!mask[d])
      out.push_back(sizes[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

int64_t reduced_numel(IntArrayRef sizes, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (mask[d]) n *= sizes[d];
  return n;
}

}  // namespace dp::backend
