#pragma once
// Pooling window arithmetic shared by the CUDA pooling kernels (src/backend/cuda/norm_pool.cu) and the host
// tests (tests/cuda/test_cuda_norm_pool.cpp), so the index math is proven on any machine.
//
// Forward windows follow the CPU kernels (src/backend/cpu/pool_kernels.cpp) element for element.
// The backward kernels gather instead of scatter: each input element sums the gradients of the
// outputs whose window can contain it (no atomics, deterministic, coalesced writes). The *_range
// functions give those outputs along one dim as [first, last); the kernels then test membership
// exactly (the max index, or the clipped avg window).
//
// Everything is templated on the (signed) index type: the kernels use int32_t when the tensors have
// fewer than 2^31 elements (32-bit division is several times cheaper on a GPU), I otherwise.
#include <cstdint>
#include "dp/core/macros.h"

namespace dp::backend::cuda::pool {

template <typename I>
DP_HOST_DEVICE DP_INLINE I imin(I a, I b) {
  return a < b ? a : b;
}
template <typename I>
DP_HOST_DEVICE DP_INLINE I imax(I a, I b) {
  return a > b ? a : b;
}

// Max pooling along one dim: output o reads inputs first, first + dilation, ... < end (clipped to
// [0, size)), as the CPU's `while (i0 < 0) i0 += d` loop.
template <typename I>
struct Span {
  I first, end;
};
template <typename I>
DP_HOST_DEVICE DP_INLINE Span<I> max_window(I o, I size, I k, I stride, I pad, I dilation) {
  I i0 = o * stride - pad;
  const I i1 = imin(i0 + (k - 1) * dilation + 1, size);
  if (i0 < 0) i0 += ((-i0 + dilation - 1) / dilation) * dilation;
  return {i0, i1};
}

// The outputs along one dim whose (dilated, unclipped) max window spans input i: PyTorch's CUDA
// p_start / p_end. Membership on the dilation grid is left to the index comparison.
template <typename I>
DP_HOST_DEVICE DP_INLINE Span<I> max_outputs_over(I i, I out_size, I k, I stride, I pad, I dilation) {
  const I extent = (k - 1) * dilation + 1;
  const I first = i + pad < extent ? 0 : (i + pad - extent) / stride + 1;
  return {first, imin((i + pad) / stride + 1, out_size)};
}

// Avg pooling along one dim: the window clipped to [0, size) and its length before that clip
// (clipped to the padded input only), as the CPU's avg_window.
template <typename I>
struct AvgSpan {
  I first, end, padded_len;
};
template <typename I>
DP_HOST_DEVICE DP_INLINE AvgSpan<I> avg_window(I o, I size, I k, I stride, I pad) {
  const I i0 = o * stride - pad;
  const I i1 = imin(i0 + k, size + pad);
  return {imax(i0, I(0)), imin(i1, size), i1 - i0};
}

// The outputs along one dim whose avg window spans input i (every one of them contains it).
template <typename I>
DP_HOST_DEVICE DP_INLINE Span<I> avg_outputs_over(I i, I out_size, I k, I stride, I pad) {
  const I first = i + pad < k ? 0 : (i + pad - k) / stride + 1;
  return {first, imin((i + pad) / stride + 1, out_size)};
}

// The avg divisor of a 2-D window (CPU avg_window): divisor_override (when > 0 is given: has_div),
// else the padded window's area (count_include_pad) or the clipped one's.
template <typename I>
DP_HOST_DEVICE DP_INLINE I avg_divisor(const AvgSpan<I>& h, const AvgSpan<I>& w, bool count_include_pad, bool has_div, I div) {
  if (has_div) return div;
  if (count_include_pad) return h.padded_len * w.padded_len;
  return (h.end - h.first) * (w.end - w.first);
}

// Adaptive pooling: output o of out_size over an input of in_size reads [start, end) (PyTorch's
// start_index / end_index).
template <typename I>
DP_HOST_DEVICE DP_INLINE Span<I> adaptive_window(I o, I out_size, I in_size) {
  return {(o / out_size) * in_size + ((o % out_size) * in_size) / out_size, 1 + ((o + 1) * in_size - 1) / out_size};
}

// The outputs whose adaptive window contains input i: the same formulas with the roles swapped
// (floor(i * out / in) .. ceil((i + 1) * out / in)), clipped to out_size (which may be 0).
template <typename I>
DP_HOST_DEVICE DP_INLINE Span<I> adaptive_outputs_over(I i, I out_size, I in_size) {
  if (out_size == 0) return {I(0), I(0)};
  const Span<I> s = adaptive_window(i, in_size, out_size);
  return {s.first, imin(s.end, out_size)};
}

}  // namespace dp::backend::cuda::pool
