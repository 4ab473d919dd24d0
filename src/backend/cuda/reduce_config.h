#pragma once
// How a CUDA reduction or softmax is laid out on the GPU: plain C++ (DP_HOST_DEVICE where the
// kernels use it), so the host compiler builds it too and tests/cuda/test_cuda_reduce.cpp checks
// it on any machine.
//
//  - IntDivider: n / d for 32-bit n and d by a multiply-high and a shift (the index math of every
//    element; a hardware 32-bit division is ~20 instructions, a 64-bit one far more).
//  - ReduceParams: a ReducePlan (backend/reduce_plan.h: kept and reduced dims, coalesced) as a
//    fixed-size struct passed by value to the kernels. Output index o -> the kept dims' input and
//    output offsets; reduced index r -> the reduced dims' input offset.
//  - ReduceLaunch: one of two kernel shapes (see choose_reduce_launch) and the split of the reduced
//    space across blocks when the outputs alone cannot fill the GPU.
//  - SoftmaxLaunch: a warp or a block per row when the softmax dim is innermost, else a thread
//    column per (outer, inner) position with the dim split across the block's rows.
#include <cstdint>
#include <limits>
#include "dp/core/errors.h"
#include "dp/core/macros.h"
#include "backend/reduce_plan.h"

namespace dp::backend::cuda::detail {

// q = n / d for 0 <= n <= INT32_MAX and 1 <= d <= INT32_MAX (Granlund & Montgomery; PyTorch's
// IntDivider): with s = ceil(log2 d) and magic = floor(2^32 (2^s - d) / d) + 1 (< 2^32),
// q = (mulhi(n, magic) + n) >> s, where the sum stays below 2^32 because n < 2^31.
struct IntDivider {
  uint32_t divisor = 1, magic = 1, shift = 0;
  IntDivider() = default;
  explicit IntDivider(uint32_t d) : divisor(d) {
    DP_CHECK(d >= 1 && d <= static_cast<uint32_t>(INT32_MAX), ValueError, "IntDivider: divisor ", d, " is outside [1, 2^31 - 1]");
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  DP_HOST_DEVICE DP_INLINE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, magic);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (t + n) >> shift;
  }
};

// The most kept (and, separately, reduced) dims a CUDA reduction handles after the plan dropped
// size-1 dims and merged neighbours; more is a NotImplementedError naming the op.
constexpr int kMaxReduceDims = 16;

struct ReduceParams {
  int nk = 0, nr = 0;  // kept / reduced dims, outermost first
  // Every index fits IntDivider (out_numel and red_numel <= INT32_MAX); else 64-bit division.
  bool idx32 = true;
  int64_t out_numel = 1, red_numel = 1;
  int64_t ksize[kMaxReduceDims] = {}, kin[kMaxReduceDims] = {}, kout[kMaxReduceDims] = {};
  int64_t rsize[kMaxReduceDims] = {}, rin[kMaxReduceDims] = {};
  IntDivider kdiv[kMaxReduceDims], rdiv[kMaxReduceDims];

  // Input and output element offsets of output o (row-major over the kept dims).
  DP_HOST_DEVICE DP_INLINE void kept_offsets(int64_t o, int64_t& in_off, int64_t& out_off) const {
    int64_t i = 0, w = 0;
    if (idx32) {
      uint32_t q = static_cast<uint32_t>(o);
      for (int d = nk - 1; d > 0; --d) {
        const uint32_t n = kdiv[d].div(q);
        const uint32_t k = q - n * kdiv[d].divisor;
        i += static_cast<int64_t>(k) * kin[d];
        w += static_cast<int64_t>(k) * kout[d];
        q = n;
      }
      if (nk > 0) {  // the outermost index is what is left
        i += static_cast<int64_t>(q) * kin[0];
        w += static_cast<int64_t>(q) * kout[0];
      }
    } else {
      int64_t q = o;
      for (int d = nk - 1; d > 0; --d) {
        const int64_t n = q / ksize[d];
        const int64_t k = q - n * ksize[d];
        i += k * kin[d];
        w += k * kout[d];
        q = n;
      }
      if (nk > 0) {
        i += q * kin[0];
        w += q * kout[0];
      }
    }
    in_off = i;
    out_off = w;
  }

  // Input element offset of reduced index r (row-major over the reduced dims).
  DP_HOST_DEVICE DP_INLINE int64_t reduced_offset(int64_t r) const {
    if (nr == 1) return r * rin[0];  // the common case: one (coalesced) reduced dim
    int64_t i = 0;
    if (idx32) {
      uint32_t q = static_cast<uint32_t>(r);
      for (int d = nr - 1; d > 0; --d) {
        const uint32_t n = rdiv[d].div(q);
        i += static_cast<int64_t>(q - n * rdiv[d].divisor) * rin[d];
        q = n;
      }
      if (nr > 0) i += static_cast<int64_t>(q) * rin[0];
    } else {
      int64_t q = r;
      for (int d = nr - 1; d > 0; --d) {
        const int64_t n = q / rsize[d];
        i += (q - n * rsize[d]) * rin[d];
        q = n;
      }
      if (nr > 0) i += q * rin[0];
    }
    return i;
  }
};

inline ReduceParams make_reduce_params(const backend::ReducePlan& plan, const char* op) {
  ReduceParams p;
  p.nk = static_cast<int>(plan.ksize.size());
  p.nr = static_cast<int>(plan.rsize.size());
  DP_CHECK(p.nk <= kMaxReduceDims && p.nr <= kMaxReduceDims, NotImplementedError, op, ": the CUDA reduction handles at most ", kMaxReduceDims,
           " kept and ", kMaxReduceDims, " reduced dims after merging contiguous ones (got ", p.nk, " and ", p.nr,
           "); make the input contiguous first");
  p.out_numel = plan.out_numel;
  p.red_numel = plan.red_numel;
  p.idx32 = plan.out_numel <= INT32_MAX && plan.red_numel <= INT32_MAX;
  for (int d = 0; d < p.nk; ++d) {
    p.ksize[d] = plan.ksize[d];
    p.kin[d] = plan.kin[d];
    p.kout[d] = plan.kout[d];
    if (p.idx32 && plan.ksize[d] > 0) p.kdiv[d] = IntDivider(static_cast<uint32_t>(plan.ksize[d]));  // size 0: no index to split
  }
  for (int d = 0; d < p.nr; ++d) {
    p.rsize[d] = plan.rsize[d];
    p.rin[d] = plan.rin[d];
    if (p.idx32 && plan.rsize[d] > 0) p.rdiv[d] = IntDivider(static_cast<uint32_t>(plan.rsize[d]));
  }
  return p;
}

constexpr int kReduceThreads = 256;    // threads per block of every reduction kernel
constexpr int64_t kMinPerThread = 16;  // reduced elements a thread should get before the rows are split across blocks
constexpr int64_t kMaxGridX = INT32_MAX;
constexpr int64_t kMaxGridY = 65535;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// The smallest power of two >= v, within [lo, hi].
inline int pow2_clamp(int64_t v, int lo, int hi) {
  int p = lo;
  while (p < hi && p < v) p *= 2;
  return p;
}

struct ReduceLaunch {
  // true ("rows"): block_x threads reduce one output together (strided over its reduced elements,
  // then a warp shuffle and, past a warp, shared memory); block_y outputs per block.
  // false ("columns"): each of block_x threads owns an output (consecutive outputs, so a warp reads
  // consecutive addresses when the innermost kept dim is contiguous); the block's block_y rows of
  // threads split the reduced elements and are combined through shared memory.
  bool rows = true;
  int block_x = 32, block_y = 8;
  int64_t groups = 1;  // output groups (block_y outputs for rows, block_x for columns)
  int64_t grid_x = 1;  // blocks along the groups (grid-stride beyond)
  int64_t splits = 1;  // blocks along the reduced space (grid y); > 1: partials + a combining pass
  int64_t chunk = 0;   // reduced elements per split (the last may have fewer)
};

// Rows when the innermost reduced dim walks memory more closely than the innermost kept dim (a
// softmax-like reduction over a contiguous dim) and each output has at least a warp's worth of
// elements; columns otherwise (a reduction over leading dims, each thread walking down its column;
// also short contiguous rows, which neighbouring threads then read as one contiguous run). The reduced space is split across blocks when the output
// groups give fewer than 8 blocks per SM and each thread would still get kMinPerThread elements;
// the partial results are then combined in a second pass, in a fixed order (deterministic: no
// atomics).
inline ReduceLaunch choose_reduce_launch(const backend::ReducePlan& p, int num_sms) {
  ReduceLaunch l;
  const int64_t out = p.out_numel, red = p.red_numel;
  const size_t nk = p.ksize.size(), nr = p.rsize.size();
  const int64_t k_inner = nk ? (p.kin[nk - 1] < 0 ? -p.kin[nk - 1] : p.kin[nk - 1]) : std::numeric_limits<int64_t>::max();
  const int64_t r_inner = nr ? (p.rin[nr - 1] < 0 ? -p.rin[nr - 1] : p.rin[nr - 1]) : std::numeric_limits<int64_t>::max();
  l.rows = nr > 0 && r_inner < k_inner && red >= 32;
  if (l.rows) {
    l.block_x = pow2_clamp(ceil_div(red, 8), 32, kReduceThreads);  // at least a warp; a block past ~2K elements
    l.block_y = kReduceThreads / l.block_x;
    l.groups = ceil_div(out, l.block_y);
  } else {
    // Enough outputs to fill the GPU with one thread each: no row split inside the block.
    const bool many = out >= int64_t{num_sms} * 1024;
    l.block_y = many ? 1 : pow2_clamp(red, 1, 8);
    l.block_x = kReduceThreads / l.block_y;
    l.groups = ceil_div(out, l.block_x);
  }
  const int64_t red_threads = l.rows ? l.block_x : l.block_y;
  const int64_t target = int64_t{num_sms} * 8;
  if (l.groups < target && red >= 2 * red_threads * kMinPerThread) {
    int64_t s = ceil_div(target, l.groups);
    s = std::min(s, red / (red_threads * kMinPerThread));
    l.splits = std::max<int64_t>(1, std::min(s, kMaxGridY));
  }
  l.chunk = l.splits > 1 ? ceil_div(red, l.splits) : red;
  if (l.splits > 1) l.splits = ceil_div(red, l.chunk);  // no empty split
  l.grid_x = std::min(l.groups, kMaxGridX);
  return l;
}

struct SoftmaxLaunch {
  // true: block_x threads per row of the (innermost) softmax dim, block_y rows per block.
  // false: block_x columns (consecutive inner positions) per block, the dim split over block_y.
  bool rows = true;
  int block_x = 32, block_y = 8;
  int64_t groups = 1;  // row or column groups
  int64_t grid_x = 1;  // blocks (grid-stride beyond)
};

// Rows: a warp per row up to 1024 elements, else a block of 256 per row. Columns: up to 32
// consecutive inner positions per block, the rest of the block's 256 threads splitting the dim.
inline SoftmaxLaunch choose_softmax_launch(int64_t outer, int64_t dsize, int64_t inner) {
  SoftmaxLaunch l;
  l.rows = inner == 1;
  if (l.rows) {
    l.block_x = dsize <= 1024 ? 32 : kReduceThreads;
    l.block_y = kReduceThreads / l.block_x;
    l.groups = ceil_div(outer, l.block_y);
  } else {
    l.block_x = pow2_clamp(inner, 1, 32);
    l.block_y = pow2_clamp(dsize, 1, kReduceThreads / l.block_x);
    l.groups = ceil_div(outer * inner, l.block_x);
  }
  l.grid_x = std::min(l.groups, kMaxGridX);
  return l;
}

}  // namespace dp::backend::cuda::detail
