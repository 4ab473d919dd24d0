// The CPU backend's fused scaled-dot-product attention (backend/attention_kernels.h): the tiled
// online-softmax algorithm of FlashAttention-2, with OpenBLAS GEMMs for the tile products.
//
// Forward, one task per (problem, query tile of bq rows), running state per row: max m, sum l and
// an accumulator acc [bq, Ev]:
//   for each key tile j (bk keys; causal: only the tiles left of the diagonal's end)
//     X = scale * Q_r K_j^T (+ bias)                      GEMM into a bq x bk scratch tile
//     m' = max(m, rowmax X);  P = exp(X - m');  a = exp(m - m')
//     l = a l + rowsum P;  acc = a acc + P V_j;  m = m'    GEMM accumulating into acc
//   O_r = acc / l (l = 0: a fully masked row, O = 0);  lse_r = m + log l (+inf when l = 0)
// Backward, one task per problem (its dK and dV gather every query tile), key tiles outermost:
//   D = rowsum(dO o O)
//   per (key tile j, query tile r):  P = exp(X - lse_r) recomputed, dV_j += P^T dO_r,
//     dP = dO_r V_j^T, dS = P o (dP - D_r), dQ_r += scale dS K_j, dK_j += scale dS^T Q_r
// (five GEMMs; the mask's gradient, when asked for, is dS). Memory: per thread one or two bq x bk
// tiles, an accumulator and a few row vectors, from the device's allocator; nothing L x S.
//
// Tasks run on the host's threads through blas::parallel_for (the calling thread alone on a
// device worker); the GEMMs inside a task run single-threaded in that task's thread.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/attention_kernels.h"
#include "backend/dispatch.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/reduce_vec.h"
#include "dp/core/errors.h"

namespace dp::backend::cpu {
namespace {

namespace blas = backend::cpu::blas;

// Row-major C[m, n] = alpha op(A) op(B) + beta C (beta 0 or 1); k = 0 handled here.
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == T(0))
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, T(0));
    return;
  }
  blas::gemm(ta, tb, m, n, k, alpha, a, std::max<int64_t>(lda, 1), b, std::max<int64_t>(ldb, 1), beta, c, std::max<int64_t>(ldc, 1));
}

struct Tiles {
  int64_t bq, bk;
};

// Tile sizes. Measured at B = 4, H = 12, T = 1024, d = 64 (CPU time, on a loaded machine, noise
// about 10-20%): tiles from 64 x 128 to 256 x 512 all ran near the GEMMs' rate, 32-row tiles
// slower. A profile of the forward at 128 x 256 showed 18% of its time in OpenBLAS packing K and V
// again for every query tile, so non-causal calls take 256 query rows; causal ones take 128, since
// a tile computes whole rows and so wastes L * bq / 2 scores above the diagonal (12% at T = 1024).
// The forward's query tiles are halved (down to 32) while they would give fewer than 4 tasks per
// thread. 256 keys keep a float32 score tile within L2 (128 or 256 KiB).
Tiles choose_tiles(const AttentionShape& s, int threads, bool forward) {
  int64_t bq = s.block_q, bk = s.block_k > 0 ? s.block_k : 256;
  if (bq <= 0) {
    bq = s.causal ? 128 : 256;
    const int64_t rows = std::max<int64_t>(s.L, 1);
    while (forward && bq > 32 && s.batch * ((rows + bq - 1) / bq) < 4 * static_cast<int64_t>(threads)) bq /= 2;
  }
  bq = std::max<int64_t>(1, std::min(bq, std::max<int64_t>(s.L, 1)));
  bk = std::max<int64_t>(1, std::min(bk, std::max<int64_t>(s.S, 1)));
  return {bq, bk};
}

template <typename T>
constexpr T kInf = std::numeric_limits<T>::infinity();

// Where one problem's mask lives, typed.
template <typename M>
struct MaskRef {
  const M* base = nullptr;  // the problem's element (0, 0)
  int64_t rs = 0, cs = 0;
};

// Adds the mask to a score tile X [m, n] (row length ld): rows r0 .., keys c0 ... Mask element
// type M: bool (false: -inf) or T (added).
template <typename T, typename M>
void apply_mask(T* x, int64_t ld, int64_t m, int64_t n, int64_t r0, int64_t c0, const MaskRef<M>& mask) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = x + i * ld;
    const M* mp = mask.base + (r0 + i) * mask.rs + c0 * mask.cs;
    if constexpr (std::is_same_v<M, bool>) {
      if (mask.cs == 1) {
        for (int64_t j = 0; j < n; ++j) row[j] = mp[j] ? row[j] : -kInf<T>;
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] = mp[j * mask.cs] ? row[j] : -kInf<T>;
      }
    } else {
      if (mask.cs == 1) {
        for (int64_t j = 0; j < n; ++j) row[j] += mp[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += mp[j * mask.cs];
      }
    }
  }
}

// How many of a tile's keys c0 .. c0 + n - 1 query row r sees: all, or (causal) those <= r.
inline int64_t visible_keys(bool causal, int64_t r, int64_t c0, int64_t n) { return causal ? std::clamp<int64_t>(r - c0 + 1, 0, n) : n; }

// x[j] = exp(x[j] - shift) for j < n; returns nothing. float32: exp_f32's polynomial written
// branch-free so that the loop vectorises (AVX-512 in a native build), with arguments below -86
// giving 0: exp_f32x8 clamps at -87.33, where 2^n * p can be a denormal, and a multiplication with
// a denormal result takes a slow microcode path (measured: a causal tile's -inf half made softmax
// rows 2.4 times slower). The values lost are below 4e-38.
template <typename T>
void exp_shifted(T* x, int64_t n, T shift) {
  if constexpr (std::is_same_v<T, float>) {
    using namespace cpu;
    constexpr float kLo = -86.0f;
#pragma GCC ivdep
    for (int64_t j = 0; j < n; ++j) {
      const float a = x[j] - shift;
      const float xc = a < kLo ? kLo : a;  // NaN stays NaN
      const float t = std::fma(xc, kLog2e, kRound);
      const float nn = t - kRound;
      const float f = std::fma(xc, kLog2eLo, std::fma(xc, kLog2e, -nn));
      float p = std::fma(kP0, f, kP1);
      p = std::fma(p, f, kP2);
      p = std::fma(p, f, kP3);
      p = std::fma(p, f, kP4);
      p = std::fma(p, f, kP5);
      p = std::fma(p, f, 1.0f);
      const float r = p * std::bit_cast<float>(std::bit_cast<int32_t>(t) << 23);
      x[j] = a < kLo ? 0.0f : r;
    }
  } else {
    for (int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j] - shift);
  }
}

// Per-problem base pointers.
template <typename T>
inline const T* at(const AttnOperand& o, int64_t b) {
  return static_cast<const T*>(o.t.data_ptr()) + o.offsets[static_cast<size_t>(b)];
}
template <typename T>
inline T* at_mut(const AttnOperand& o, int64_t b) {
  return static_cast<T*>(o.t.data_ptr()) + o.offsets[static_cast<size_t>(b)];
}
template <typename M>
MaskRef<M> mask_of(const AttnMask& m, int64_t b) {
  if constexpr (std::is_same_v<M, std::nullptr_t>) {
    return {};
  } else {
    return {static_cast<const M*>(m.t.data_ptr()) + m.offsets[static_cast<size_t>(b)], m.row_stride, m.col_stride};
  }
}

template <typename T>
T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return backend::cpu::exp_f32(x);
  else
    return std::exp(x);
}

// ---------------------------------------------------------------------------------------------
// Forward

template <typename T, typename M>
void forward_typed(const AttentionForwardArgs& a) {
  const AttentionShape& s = a.shape;
  const int threads = blas::parallel_slots();
  const Tiles tiles = choose_tiles(s, threads, /*forward=*/true);
  const int64_t bq = tiles.bq, bk = tiles.bk;
  const int64_t n_qt = (s.L + bq - 1) / bq;
  const int64_t tasks = s.batch * n_qt;
  const int slots = static_cast<int>(std::min<int64_t>(threads, tasks));  // scratch for the threads that can get work
  // Per thread: the score tile, the accumulator, the running max and sum.
  const int64_t per_slot = bq * bk + bq * s.Ev + 2 * bq;
  Tensor scratch = make_empty({static_cast<int64_t>(slots) * per_slot}, a.out.t.dtype(), a.out.t.device());
  T* const scratch_base = static_cast<T*>(scratch.data_ptr());
  T* const lse_base = static_cast<T*>(a.lse.data_ptr());
  const T scale = static_cast<T>(s.scale);

  blas::parallel_for(tasks, slots, [&](int64_t task, int slot) {
    // Heavier (later, for causal) query tiles first.
    const int64_t b = task / n_qt, r = n_qt - 1 - task % n_qt;
    const int64_t r0 = r * bq, m = std::min(bq, s.L - r0);
    T* const sbuf = scratch_base + slot * per_slot;
    T* const acc = sbuf + bq * bk;
    T* const mrow = acc + bq * s.Ev;
    T* const lrow = mrow + bq;
    const T* q = at<T>(a.q, b) + r0 * a.q.row_stride;
    const T* k = at<T>(a.k, b);
    const T* v = at<T>(a.v, b);
    const MaskRef<M> mask = mask_of<M>(a.mask, b);
    std::fill(acc, acc + m * s.Ev, T(0));
    std::fill(mrow, mrow + m, -kInf<T>);
    std::fill(lrow, lrow + m, T(0));
    const int64_t k_end = s.causal ? std::min(s.S, r0 + m) : s.S;
    for (int64_t c0 = 0; c0 < k_end; c0 += bk) {
      const int64_t n = std::min(bk, k_end - c0);
      gemm<T>(false, true, m, n, s.E, scale, q, a.q.row_stride, k + c0 * a.k.row_stride, a.k.row_stride, T(0), sbuf, n);
      if constexpr (!std::is_same_v<M, std::nullptr_t>) apply_mask<T, M>(sbuf, n, m, n, r0, c0, mask);
      for (int64_t i = 0; i < m; ++i) {
        T* row = sbuf + i * n;
        const int64_t vis = visible_keys(s.causal, r0 + i, c0, n);  // the rest is masked: weight 0
        const T m_new = std::max(mrow[i], vis > 0 ? backend::cpu::row_max(row, vis) : -kInf<T>);
        if (m_new == -kInf<T>) {  // every key so far masked: nothing to add
          std::fill(row, row + n, T(0));
          continue;
        }
        exp_shifted<T>(row, vis, m_new);
        std::fill(row + vis, row + n, T(0));
        const T sum = backend::cpu::row_sum(row, vis);
        const T alpha = exp_of<T>(mrow[i] - m_new);  // 0 while the row had nothing (m = -inf)
        if (alpha != T(1)) {
          T* ar = acc + i * s.Ev;
          for (int64_t e = 0; e < s.Ev; ++e) ar[e] *= alpha;
        }
        lrow[i] = lrow[i] * alpha + sum;
        mrow[i] = m_new;
      }
      gemm<T>(false, false, m, s.Ev, n, T(1), sbuf, n, v + c0 * a.v.row_stride, a.v.row_stride, T(1), acc, s.Ev);
    }
    T* o = at_mut<T>(a.out, b) + r0 * a.out.row_stride;
    T* lse = lse_base + b * s.L + r0;
    for (int64_t i = 0; i < m; ++i) {
      const T l = lrow[i];
      const T inv = l > T(0) ? T(1) / l : T(0);
      const T* ar = acc + i * s.Ev;
      T* orow = o + i * a.out.row_stride;
      for (int64_t e = 0; e < s.Ev; ++e) orow[e] = ar[e] * inv;
      lse[i] = l > T(0) ? mrow[i] + std::log(l) : kInf<T>;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Backward

template <typename T, typename M>
void backward_typed(const AttentionBackwardArgs& a) {
  const AttentionShape& s = a.shape;
  const int threads = blas::parallel_slots();
  const Tiles tiles = choose_tiles(s, threads, /*forward=*/false);
  const int slots = static_cast<int>(std::min<int64_t>(threads, s.batch));
  const int64_t bq = tiles.bq, bk = tiles.bk;
  // Per thread: P and dP tiles, and D (one value per query row).
  const int64_t per_slot = 2 * bq * bk + s.L;
  Tensor scratch = make_empty({static_cast<int64_t>(slots) * per_slot}, a.out.t.dtype(), a.out.t.device());
  T* const scratch_base = static_cast<T*>(scratch.data_ptr());
  const T* const lse_base = static_cast<const T*>(a.lse.data_ptr());
  T* const dmask_base = a.dmask.defined() ? static_cast<T*>(a.dmask.data_ptr()) : nullptr;
  const T scale = static_cast<T>(s.scale);
  const bool need_dq = a.dq.defined(), need_dk = a.dk.defined(), need_dv = a.dv.defined();
  const bool need_ds = need_dq || need_dk || dmask_base != nullptr;

  blas::parallel_for(s.batch, slots, [&](int64_t b, int slot) {
    T* const pbuf = scratch_base + slot * per_slot;
    T* const dpbuf = pbuf + bq * bk;
    T* const drow = dpbuf + bq * bk;
    const T* q = at<T>(a.q, b);
    const T* k = at<T>(a.k, b);
    const T* v = at<T>(a.v, b);
    const T* o = at<T>(a.out, b);
    const T* dout = at<T>(a.dout, b);
    const T* lse = lse_base + b * s.L;
    const MaskRef<M> mask = mask_of<M>(a.mask, b);
    T* dq = need_dq ? at_mut<T>(a.dq, b) : nullptr;
    T* dk = need_dk ? at_mut<T>(a.dk, b) : nullptr;
    T* dv = need_dv ? at_mut<T>(a.dv, b) : nullptr;
    T* dmask = dmask_base ? dmask_base + b * s.L * s.S : nullptr;
    for (int64_t i = 0; i < s.L; ++i) drow[i] = backend::cpu::row_dot(dout + i * a.dout.row_stride, o + i * a.out.row_stride, s.Ev);
    if (dmask && s.causal) std::fill(dmask, dmask + s.L * s.S, T(0));  // (a mask and causal never meet: kept for safety)
    // The first contribution to a gradient row block writes it (beta 0); blocks nothing reaches are zeroed.
    if (need_dq && s.S == 0)
      for (int64_t i = 0; i < s.L; ++i) std::fill(dq + i * a.dq.row_stride, dq + i * a.dq.row_stride + s.E, T(0));
    for (int64_t c0 = 0; c0 < s.S; c0 += bk) {
      const int64_t n = std::min(bk, s.S - c0);
      const T* kj = k + c0 * a.k.row_stride;
      const T* vj = v + c0 * a.v.row_stride;
      // Causal: query rows before c0 see none of these keys (none at all when c0 >= L).
      const int64_t r_first = !s.causal ? 0 : c0 >= s.L ? s.L : c0 / bq * bq;
      if (r_first == s.L) {
        for (int64_t j = c0; j < c0 + n; ++j) {
          if (need_dk) std::fill(dk + j * a.dk.row_stride, dk + j * a.dk.row_stride + s.E, T(0));
          if (need_dv) std::fill(dv + j * a.dv.row_stride, dv + j * a.dv.row_stride + s.Ev, T(0));
        }
      }
      for (int64_t r0 = r_first; r0 < s.L; r0 += bq) {
        const int64_t m = std::min(bq, s.L - r0);
        const T* qr = q + r0 * a.q.row_stride;
        const T* dor = dout + r0 * a.dout.row_stride;
        const T beta_kv = r0 == r_first ? T(0) : T(1), beta_q = c0 == 0 ? T(0) : T(1);
        gemm<T>(false, true, m, n, s.E, scale, qr, a.q.row_stride, kj, a.k.row_stride, T(0), pbuf, n);
        if constexpr (!std::is_same_v<M, std::nullptr_t>) apply_mask<T, M>(pbuf, n, m, n, r0, c0, mask);
        for (int64_t i = 0; i < m; ++i) {
          const int64_t vis = visible_keys(s.causal, r0 + i, c0, n);
          exp_shifted<T>(pbuf + i * n, vis, lse[r0 + i]);  // lse = +inf (fully masked row): 0
          std::fill(pbuf + i * n + vis, pbuf + (i + 1) * n, T(0));
        }
        if (need_dv) gemm<T>(true, false, n, s.Ev, m, T(1), pbuf, n, dor, a.dout.row_stride, beta_kv, dv + c0 * a.dv.row_stride, a.dv.row_stride);
        if (!need_ds) continue;
        gemm<T>(false, true, m, n, s.Ev, T(1), dor, a.dout.row_stride, vj, a.v.row_stride, T(0), dpbuf, n);
        for (int64_t i = 0; i < m; ++i) {
          const T* p = pbuf + i * n;
          T* ds = dpbuf + i * n;
          const T d = drow[r0 + i];
          for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - d);
          if (dmask) std::memcpy(dmask + (r0 + i) * s.S + c0, ds, static_cast<size_t>(n) * sizeof(T));
        }
        if (need_dq) gemm<T>(false, false, m, s.E, n, scale, dpbuf, n, kj, a.k.row_stride, beta_q, dq + r0 * a.dq.row_stride, a.dq.row_stride);
        if (need_dk) gemm<T>(true, false, n, s.E, m, scale, dpbuf, n, qr, a.q.row_stride, beta_kv, dk + c0 * a.dk.row_stride, a.dk.row_stride);
      }
    }
  });
}

// Calls f.template operator()<T, M>() for the compute type and the mask's element type.
template <typename F>
void dispatch_types(DType compute, const AttnMask& mask, F&& f) {
  auto with_mask = [&]<typename T>() {
    if (!mask.defined()) return f.template operator()<T, std::nullptr_t>();
    if (mask.t.dtype() == kBool) return f.template operator()<T, bool>();
    DP_CHECK(mask.t.dtype() == compute, DTypeError, "scaled_dot_product_attention: the fused kernel expects a bool mask or one of dtype ",
             dtype_name(compute), ", got ", dtype_name(mask.t.dtype()));
    return f.template operator()<T, T>();
  };
  return backend::dispatch_types<float, double>(compute, "scaled_dot_product_attention (fused CPU kernel)", with_mask);
}

void attention_forward_kernel(const AttentionForwardArgs& a) {
  if (a.shape.batch == 0 || a.shape.L == 0) return;
  dispatch_types(a.out.t.dtype(), a.mask, [&]<typename T, typename M>() { forward_typed<T, M>(a); });
}

void attention_backward_kernel(const AttentionBackwardArgs& a) {
  if (a.shape.batch == 0) return;
  dispatch_types(a.out.t.dtype(), a.mask, [&]<typename T, typename M>() { backward_typed<T, M>(a); });
}

}  // namespace

void register_attention_kernels() {
  DP_REGISTER_KERNEL(CPU, attention_forward_kernel);
  DP_REGISTER_KERNEL(CPU, attention_backward_kernel);
}

}  // namespace dp::backend::cpu
