#pragma once
// The reduction engine. A reduction of `in` over a set of dims is described by a ReducePlan: the
// kept dims (one output element each) and the reduced dims, both with size-1 dims dropped, optionally
// reordered by input stride, and coalesced where memory allows. run_reduce() then picks one of three
// loops:
//  - inner:  the innermost reduced dim is contiguous: each output reduces contiguous rows through
//            the op's row() (several accumulators, vectorised);
//  - outer:  the innermost kept dim is contiguous: a block of outputs is accumulated row by row, so
//            the inner loop walks contiguous input and a contiguous accumulator block (vectorised);
//  - strided fallback for everything else.
//
// An op provides:
//   using acc_type = ...;
//   acc_type identity() const;
//   acc_type step(acc_type a, T v, int64_t ridx) const;     // ridx: linear index in the reduced space
//   acc_type combine(acc_type a, acc_type b) const;         // a comes first in reduced order
//   acc_type row(const T* p, int64_t n, int64_t ridx0) const;  // n contiguous elements from ridx0
//   void accumulate(acc_type* a, const T* q, int64_t rstride, int64_t rows, int64_t n, int64_t ridx0) const;
//                                                            // the outer loop's step (see ReduceOpBase)
//   void store(acc_type a, int64_t out_offset) const;       // writes one output (element offset)
// ReduceOpBase supplies row() and accumulate() built on step(); ops override them with faster loops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>
#include "backend/reduce_kernels.h"
#include "backend/reduce_plan.h"
#include "backend/tensor_nograd.h"
#include "backend/cpu/cpu_dispatch.h"
#include "backend/dispatch.h"
#include "backend/cpu/loops.h"
#include "dp/core/tensor.h"

namespace dp::backend::cpu {

// Calls f(offset_a, offset_b) for every index of the multi-dim space `size` (row-major), where the
// offsets advance by strides sa / sb. An empty space has one element (offsets 0).
template <typename F>
inline void for_each_offset(const int64_t* size, const int64_t* sa, const int64_t* sb, int nd, F&& f) {
  if (nd == 0) {
    f(int64_t(0), int64_t(0));
    return;
  }
  for (int d = 0; d < nd; ++d)
    if (size[d] == 0) return;
  const int64_t n = size[nd - 1], da = sa[nd - 1], db = sb ? sb[nd - 1] : 0;
  int64_t idx_buf[16] = {0};
  std::vector<int64_t> idx_heap;
  int64_t* idx = idx_buf;
  if (nd > 16) {
    idx_heap.assign(static_cast<size_t>(nd), 0);
    idx = idx_heap.data();
  }
  int64_t oa = 0, ob = 0;
  for (;;) {
    int64_t a = oa, b = ob;
    for (int64_t i = 0; i < n; ++i, a += da, b += db) f(a, b);
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < size[d]) {
        oa += sa[d];
        if (sb) ob += sb[d];
        break;
      }
      oa -= sa[d] * (size[d] - 1);
      if (sb) ob -= sb[d] * (size[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

template <typename Derived, typename T, typename Acc>
struct ReduceOpBase {
  using acc_type = Acc;
  Acc row(const T* p, int64_t n, int64_t ridx0) const {
    const Derived& self = static_cast<const Derived&>(*this);
    Acc a = self.identity();
    for (int64_t i = 0; i < n; ++i) a = self.step(a, p[i], ridx0 + i);
    return a;
  }
  // The outer loop's step: `rows` reduced rows (row r at q + r * rstride, reduced index ridx0 + r)
  // folded into the n accumulators a[j], column j reading q[r * rstride + j]. Every a[j] has seen
  // the same rows before.
  void accumulate(Acc* a, const T* q, int64_t rstride, int64_t rows, int64_t n, int64_t ridx0) const {
    const Derived& self = static_cast<const Derived&>(*this);
    for (int64_t r = 0; r < rows; ++r) {
      const T* qr = q + r * rstride;
      for (int64_t j = 0; j < n; ++j) a[j] = self.step(a[j], qr[j], ridx0 + r);
    }
  }
};

// Runs the reduction described by `p` over `in` (pointer to the element at the input's offset).
// In a portable build it is also compiled, with all it calls, for AVX2 and AVX-512 and chosen at run
// time (DP_TARGET_CLONES_FLATTEN, backend/cpu/cpu_dispatch.h); the accumulation order is the same in
// every copy.
template <typename T, typename Op>
DP_TARGET_CLONES_FLATTEN void run_reduce(const ReducePlan& p, const T* in, const Op& op) {
  using A = typename Op::acc_type;
  const int nk = static_cast<int>(p.ksize.size());
  const int nr = static_cast<int>(p.rsize.size());
  if (p.out_numel == 0) return;
  if (p.red_numel == 0) {
    for_each_offset(p.ksize.data(), p.kout.data(), nullptr, nk, [&](int64_t o, int64_t) { op.store(op.identity(), o); });
    return;
  }
  // Inner: contiguous rows along the innermost reduced dim.
  if (nr > 0 && p.rin[nr - 1] == 1) {
    const int64_t n = p.rsize[nr - 1];
    for_each_offset(p.ksize.data(), p.kin.data(), p.kout.data(), nk, [&](int64_t ioff, int64_t ooff) {
      const T* base = in + ioff;
      if (nr == 1) {
        op.store(op.row(base, n, 0), ooff);
        return;
      }
      A acc = op.identity();
      int64_t ridx = 0;
      for_each_offset(p.rsize.data(), p.rin.data(), nullptr, nr - 1, [&](int64_t roff, int64_t) {
        acc = op.combine(acc, op.row(base + roff, n, ridx));
        ridx += n;
      });
      op.store(acc, ooff);
    });
    return;
  }
  // Outer: accumulate contiguous blocks of the innermost kept dim, a run of reduced rows at a time.
  if (nk > 0 && p.kin[nk - 1] == 1) {
    const int64_t m = p.ksize[nk - 1];
    const int64_t ostride = p.kout[nk - 1];
    const int nro = nr > 0 ? nr - 1 : 0;  // reduced dims outside the innermost one
    const int64_t rows = nr > 0 ? p.rsize[nr - 1] : 1;
    const int64_t rstride = nr > 0 ? p.rin[nr - 1] : 0;
    constexpr int64_t kBlock = 512;
    std::unique_ptr<A[]> acc(new A[static_cast<size_t>(std::min(m, kBlock))]);  // not vector: A may be bool
    for_each_offset(p.ksize.data(), p.kin.data(), p.kout.data(), nk - 1, [&](int64_t ioff, int64_t ooff) {
      for (int64_t j0 = 0; j0 < m; j0 += kBlock) {
        const int64_t bn = std::min(kBlock, m - j0);
        A* a = acc.get();
        for (int64_t j = 0; j < bn; ++j) a[j] = op.identity();
        const T* base = in + ioff + j0;
        int64_t ridx = 0;
        for_each_offset(p.rsize.data(), p.rin.data(), nullptr, nro, [&](int64_t roff, int64_t) {
          op.accumulate(a, base + roff, rstride, rows, bn, ridx);
          ridx += rows;
        });
        for (int64_t j = 0; j < bn; ++j) op.store(a[j], ooff + (j0 + j) * ostride);
      }
    });
    return;
  }
  // Strided fallback.
  for_each_offset(p.ksize.data(), p.kin.data(), p.kout.data(), nk, [&](int64_t ioff, int64_t ooff) {
    const T* base = in + ioff;
    A acc = op.identity();
    int64_t ridx = 0;
    for_each_offset(p.rsize.data(), p.rin.data(), nullptr, nr, [&](int64_t roff, int64_t) { acc = op.step(acc, base[roff], ridx++); });
    op.store(acc, ooff);
  });
}

// ---- helpers shared by the reduction kernels and ops ----

template <typename T>
inline bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

// The value type reductions compute in: 16-bit floats widen to float.
template <typename T>
using compute_t = std::conditional_t<is_reduced_float_v<T>, float, T>;

// acc[j] += sum over `rows` rows of q[r * row_stride + j], j < n: four rows per pass over the
// accumulators (a quarter of their loads and stores), grouped ((r0 + r1) + (r2 + r3)). The one
// column-sum loop of sum/mean over leading dims and of sum_to's bias-gradient fast path, so both
// give the same bits.
template <typename A, typename T>
inline void add_rows_by_four(A* acc, const T* q, int64_t row_stride, int64_t rows, int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const T* q0 = q + r * row_stride;
    const T* q1 = q0 + row_stride;
    const T* q2 = q1 + row_stride;
    const T* q3 = q2 + row_stride;
    for (int64_t j = 0; j < n; ++j) acc[j] += (convert<A>(q0[j]) + convert<A>(q1[j])) + (convert<A>(q2[j]) + convert<A>(q3[j]));
  }
  for (; r < rows; ++r) {
    const T* qr = q + r * row_stride;
    for (int64_t j = 0; j < n; ++j) acc[j] += convert<A>(qr[j]);
  }
}

// ---- the CPU backend's kernels (reduce_*.cpp) ----
// The implementations of backend/reduce_kernels.h (contracts there) on host memory; the ops call
// backend::sum_kernel etc., which pick the backend.

ReduceKernel sum_kernel;
ReduceKernel mean_kernel;
MinMaxKernel minmax_kernel;
MinMaxIndexKernel minmax_index_kernel;
VarKernel var_kernel;
ReduceKernel logsumexp_kernel;
NormKernel norm_kernel;
SoftmaxKernel softmax_kernel;
SoftmaxBackwardKernel softmax_backward_kernel;
SumRowsKernel sum_rows_kernel;

}  // namespace dp::backend::cpu
