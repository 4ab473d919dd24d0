#pragma once
// Index math of the CUDA element-wise launch, plain C++ with DP_HOST_DEVICE so the host compiler
// builds it too (tests/cuda/test_offset_calculator.cpp checks it on any machine).
//
// An OffsetCalculator<N, I> maps the linear (row-major) index of an element of the iteration shape
// to the byte offset of that element in each of N operands (operand 0 the output; inputs broadcast
// by stride 0). make_offset_calculator coalesces first: size-1 dims are dropped and neighbouring
// dims merged where every operand's strides allow, so a contiguous or row-broadcast operand costs
// one or two divisions per element. I (uint32_t or uint64_t) is the index type: 32-bit division is
// much cheaper on a GPU and is used whenever the element count fits.
#include <cstdint>
#include "dp/core/errors.h"
#include "dp/core/macros.h"

namespace dp::backend::cuda::detail {

// The most dims an element-wise operand may have after coalescing (PyTorch's MAX_DIMS).
constexpr int kMaxDims = 25;

template <int N, typename I>
struct OffsetCalculator {
  int dims = 0;
  I sizes[kMaxDims];             // innermost first
  int64_t strides[kMaxDims][N];  // bytes

  struct Offsets {
    int64_t v[N];
  };
  DP_HOST_DEVICE DP_INLINE Offsets get(I linear) const {
    Offsets o;
    DP_UNROLL
    for (int k = 0; k < N; ++k) o.v[k] = 0;
    DP_UNROLL
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == dims) break;
      const I q = linear / sizes[d];
      const I r = linear - q * sizes[d];
      linear = q;
      DP_UNROLL
      for (int k = 0; k < N; ++k) o.v[k] += static_cast<int64_t>(r) * strides[d][k];
    }
    return o;
  }
};

// shape: the iteration shape (ndim sizes, outermost first); strides[k]: operand k's strides in
// bytes for that shape (0 where it broadcasts). Throws NotImplementedError past kMaxDims.
template <int N, typename I>
OffsetCalculator<N, I> make_offset_calculator(int ndim, const int64_t* shape, const int64_t* const* strides) {
  // Collect innermost first, skipping size-1 dims.
  int64_t sz[64];
  int64_t st[64][N];
  int nd = 0;
  DP_CHECK(ndim <= 64, NotImplementedError, "CUDA element-wise kernel: ", ndim, " dims are more than supported (64)");
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    sz[nd] = shape[d];
    for (int k = 0; k < N; ++k) st[nd][k] = strides[k][d];
    ++nd;
  }
  // Merge dim j+1 (outer) into dim j (inner) when, for every operand, stride[j+1] == stride[j] * size[j].
  int out = 0;
  for (int j = 0; j < nd; ++j) {
    if (out > 0) {
      bool can = true;
      for (int k = 0; k < N; ++k) can = can && st[j][k] == st[out - 1][k] * sz[out - 1];
      if (can) {
        sz[out - 1] *= sz[j];
        continue;
      }
    }
    sz[out] = sz[j];
    for (int k = 0; k < N; ++k) st[out][k] = st[j][k];
    ++out;
  }
  DP_CHECK(out <= kMaxDims, NotImplementedError, "CUDA element-wise kernel: ", out, " dims after merging are more than supported (", kMaxDims, ")");
  OffsetCalculator<N, I> oc;
  oc.dims = out;
  for (int d = 0; d < out; ++d) {
    oc.sizes[d] = static_cast<I>(sz[d]);
    for (int k = 0; k < N; ++k) oc.strides[d][k] = st[d][k];
  }
  return oc;
}

}  // namespace dp::backend::cuda::detail
