// CUDA pooling, batch norm and layer norm kernels (see cuda/norm_pool.h for the contract).
//
// Layout of the work:
//  - pooling: one thread per output element (forward) or per input element (backward, gathering
//    from the outputs whose window can hold it: cuda/pool_windows.h); grid-stride loops, 64-bit
//    indices, consecutive threads on consecutive elements (coalesced).
//  - reductions (per row, per channel, per column): each thread accumulates a strided part, the
//    block combines its threads in shared memory in a fixed tree order, and where one block is not
//    enough (batch-norm channels, layer-norm weight-gradient columns) blocks write partials that a
//    second kernel combines per channel in a fixed order: deterministic, no atomics.
//  - statistics: Welford (count, mean, M2) per thread and Chan's combination, in float for float32
//    data and double for float64, so a large mean does not cancel the variance away.
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include "backend/dispatch.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm_pool.h"
#include "backend/cuda/pool_windows.h"

namespace dp::backend::cuda {
namespace {

using detail::grid_for;
using detail::kThreads;

// Accumulation type: float for float32, float16 and bfloat16 data, double for float64.
template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};

// float16/bfloat16 (as PyTorch runs models after .to(bfloat16)): dp::Half/BFloat16 convert to
// float in every arithmetic expression, so the kernels compute in float and round once on store.
template <typename F>
void dispatch_fp(DType dt, const char* op, F&& f) {
  backend::dispatch_types<float, double, BFloat16, Half>(dt, op, std::forward<F>(f));
}

struct Launch {
  int dev;
  cudaStream_t stream;
};
Launch launch_on(const Tensor& t) {
  const int dev = t.device().index;
  return {dev, current_stream(dev).handle()};
}

template <typename T>
const T* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <typename T>
T* mptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

__device__ DP_INLINE int64_t global_thread() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ DP_INLINE int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ================================================================= pooling

// The geometry in the kernel's index type.
template <typename I>
struct PoolDims {
  I H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
};
template <typename I>
PoolDims<I> dims_of(const Pool2dGeometry& g) {
  return {static_cast<I>(g.H),  static_cast<I>(g.W),  static_cast<I>(g.OH), static_cast<I>(g.OW), static_cast<I>(g.kh), static_cast<I>(g.kw),
          static_cast<I>(g.sh), static_cast<I>(g.sw), static_cast<I>(g.ph), static_cast<I>(g.pw), static_cast<I>(g.dh), static_cast<I>(g.dw)};
}

// 32-bit index math is safe when every element index, window bound and the adaptive products
// (i + 1) * size stay far below 2^31.
bool pool_fits_int32(const Pool2dGeometry& g, int64_t divisor) {
  constexpr int64_t kLim = int64_t{1} << 30;
  const int64_t span_h = g.H + 2 * g.ph + g.kh * g.dh + g.sh, span_w = g.W + 2 * g.pw + g.kw * g.dw + g.sw;
  return g.planes * g.H * g.W < kLim && g.planes * g.OH * g.OW < kLim && (g.H + 1) * (g.OH + 1) < kLim && (g.W + 1) * (g.OW + 1) < kLim &&
         span_h * (g.OH + 1) < kLim && span_w * (g.OW + 1) < kLim && g.kh * g.kw < kLim && divisor < kLim && divisor > -kLim;
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) max_pool_fwd(const T* x, T* out, int64_t* ind, I n, PoolDims<I> g) {
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I idx = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; idx < n; idx += stride) {
    const I ow = idx % g.OW, t = idx / g.OW, oh = t % g.OH, p = t / g.OH;
    const pool::Span<I> hs = pool::max_window(oh, g.H, g.kh, g.sh, g.ph, g.dh);
    const pool::Span<I> ws = pool::max_window(ow, g.W, g.kw, g.sw, g.pw, g.dw);
    const T* xp = x + static_cast<int64_t>(p) * g.H * g.W;
    I mi = hs.first * g.W + ws.first;
    T m = static_cast<T>(-INFINITY);
    for (I ih = hs.first; ih < hs.end; ih += g.dh) {
      for (I iw = ws.first; iw < ws.end; iw += g.dw) {
        const T v = xp[ih * g.W + iw];
        if (v > m || v != v) {  // a NaN always wins (the last one of the window), as on the CPU
          m = v;
          mi = ih * g.W + iw;
        }
      }
    }
    out[idx] = m;
    ind[idx] = mi;
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) max_pool_bwd(const T* go, const int64_t* ind, T* gx, I n, PoolDims<I> g) {
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I idx = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; idx < n; idx += stride) {
    const I w = idx % g.W, t = idx / g.W, h = t % g.H, p = t / g.H;
    const pool::Span<I> hs = pool::max_outputs_over(h, g.OH, g.kh, g.sh, g.ph, g.dh);
    const pool::Span<I> ws = pool::max_outputs_over(w, g.OW, g.kw, g.sw, g.pw, g.dw);
    const int64_t target = h * g.W + w;
    const int64_t base = static_cast<int64_t>(p) * g.OH * g.OW;
    typename AccOf<T>::type acc = 0;  // in output order, as the CPU's scatter (float for the 16-bit types)
    for (I oh = hs.first; oh < hs.end; ++oh)
      for (I ow = ws.first; ow < ws.end; ++ow) {
        const int64_t o = base + oh * g.OW + ow;
        if (ind[o] == target) acc += go[o];
      }
    gx[idx] = static_cast<T>(acc);
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) avg_pool_fwd(const T* x, T* out, I n, PoolDims<I> g, bool cip, bool has_div, I div) {
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I idx = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; idx < n; idx += stride) {
    const I ow = idx % g.OW, t = idx / g.OW, oh = t % g.OH, p = t / g.OH;
    const pool::AvgSpan<I> hs = pool::avg_window(oh, g.H, g.kh, g.sh, g.ph);
    const pool::AvgSpan<I> ws = pool::avg_window(ow, g.W, g.kw, g.sw, g.pw);
    if (hs.first >= hs.end || ws.first >= ws.end) {
      out[idx] = T(0);
      continue;
    }
    const T* xp = x + static_cast<int64_t>(p) * g.H * g.W;
    typename AccOf<T>::type s = 0;
    for (I ih = hs.first; ih < hs.end; ++ih)
      for (I iw = ws.first; iw < ws.end; ++iw) s += xp[ih * g.W + iw];
    out[idx] = static_cast<T>(s / static_cast<typename AccOf<T>::type>(pool::avg_divisor(hs, ws, cip, has_div, div)));
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) avg_pool_bwd(const T* go, T* gx, I n, PoolDims<I> g, bool cip, bool has_div, I div) {
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I idx = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; idx < n; idx += stride) {
    const I w = idx % g.W, t = idx / g.W, h = t % g.H, p = t / g.H;
    const pool::Span<I> hr = pool::avg_outputs_over(h, g.OH, g.kh, g.sh, g.ph);
    const pool::Span<I> wr = pool::avg_outputs_over(w, g.OW, g.kw, g.sw, g.pw);
    const T* gop = go + static_cast<int64_t>(p) * g.OH * g.OW;
    typename AccOf<T>::type acc = 0;
    for (I oh = hr.first; oh < hr.end; ++oh) {
      const pool::AvgSpan<I> hs = pool::avg_window(oh, g.H, g.kh, g.sh, g.ph);
      for (I ow = wr.first; ow < wr.end; ++ow) {
        const pool::AvgSpan<I> ws = pool::avg_window(ow, g.W, g.kw, g.sw, g.pw);
        acc += gop[oh * g.OW + ow] / static_cast<typename AccOf<T>::type>(pool::avg_divisor(hs, ws, cip, has_div, div));
      }
    }
    gx[idx] = static_cast<T>(acc);
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) adaptive_fwd(const T* x, T* out, I n, PoolDims<I> g) {
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I idx = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; idx < n; idx += stride) {
    const I ow = idx % g.OW, t = idx / g.OW, oh = t % g.OH, p = t / g.OH;
    const pool::Span<I> hs = pool::adaptive_window(oh, g.OH, g.H), ws = pool::adaptive_window(ow, g.OW, g.W);
    const T* xp = x + static_cast<int64_t>(p) * g.H * g.W;
    typename AccOf<T>::type s = 0;
    for (I ih = hs.first; ih < hs.end; ++ih)
      for (I iw = ws.first; iw < ws.end; ++iw) s += xp[ih * g.W + iw];
    out[idx] = static_cast<T>(s / static_cast<typename AccOf<T>::type>((hs.end - hs.first) * (ws.end - ws.first)));
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) adaptive_bwd(const T* go, T* gx, I n, PoolDims<I> g) {
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I idx = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; idx < n; idx += stride) {
    const I w = idx % g.W, t = idx / g.W, h = t % g.H, p = t / g.H;
    const pool::Span<I> hr = pool::adaptive_outputs_over(h, g.OH, g.H), wr = pool::adaptive_outputs_over(w, g.OW, g.W);
    const T* gop = go + static_cast<int64_t>(p) * g.OH * g.OW;
    typename AccOf<T>::type acc = 0;
    for (I oh = hr.first; oh < hr.end; ++oh) {
      const pool::Span<I> hs = pool::adaptive_window(oh, g.OH, g.H);
      for (I ow = wr.first; ow < wr.end; ++ow) {
        const pool::Span<I> ws = pool::adaptive_window(ow, g.OW, g.W);
        acc += gop[oh * g.OW + ow] / static_cast<typename AccOf<T>::type>((hs.end - hs.first) * (ws.end - ws.first));
      }
    }
    gx[idx] = static_cast<T>(acc);
  }
}

// Calls f.template operator()<T, I>() for the tensor dtype (float32 / float64 / float16 / bfloat16) and the index type
// the geometry allows.
template <typename F>
void dispatch_pool(DType dt, const char* op, const Pool2dGeometry& g, int64_t divisor, F&& f) {
  dispatch_fp(dt, op, [&]<typename T>() {
    if (pool_fits_int32(g, divisor))
      f.template operator()<T, int32_t>();
    else
      f.template operator()<T, int64_t>();
  });
}

// ================================================================= reductions

// Welford statistics of a set of values: count, mean, sum of squared deviations.
template <typename A>
struct Welford {
  A n, mean, m2;
};
template <typename A>
__device__ DP_INLINE void welford_add(Welford<A>& w, A v) {
  w.n += A(1);
  const A d = v - w.mean;
  w.mean += d / w.n;
  w.m2 += d * (v - w.mean);
}
// Chan et al.'s combination of two disjoint sets (a first).
template <typename A>
__host__ __device__ DP_INLINE Welford<A> welford_combine(const Welford<A>& a, const Welford<A>& b) {
  const A n = a.n + b.n;
  if (n == A(0)) return a;
  const A d = b.mean - a.mean, f = b.n / n;
  return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
}

// Two running sums (gradient reductions).
template <typename A>
struct Sums2 {
  A s1, s2;
};
template <typename A>
__device__ DP_INLINE Sums2<A> sums_combine(const Sums2<A>& a, const Sums2<A>& b) {
  return {a.s1 + b.s1, a.s2 + b.s2};
}

struct WelfordCombine {
  template <typename A>
  __device__ Welford<A> operator()(const Welford<A>& a, const Welford<A>& b) const {
    return welford_combine(a, b);
  }
};
struct SumsCombine {
  template <typename A>
  __device__ Sums2<A> operator()(const Sums2<A>& a, const Sums2<A>& b) const {
    return sums_combine(a, b);
  }
};

// Combines the values of the block's n threads (a power of two, thread t = threadIdx.y *
// blockDim.x + threadIdx.x) in shared memory sh[n], in a fixed tree order; every thread gets the
// result. sh is free again on return.
template <typename Acc, typename Combine>
__device__ Acc block_reduce(Acc v, Acc* sh, Combine comb) {
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int n = blockDim.x * blockDim.y;
  sh[t] = v;
  __syncthreads();
  for (int s = n / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = comb(sh[t], sh[t + s]);
    __syncthreads();
  }
  const Acc r = sh[0];
  __syncthreads();
  return r;
}

// Combines over threadIdx.y only (blockDim.y a power of two): column x of the block gets its sum.
template <typename Acc, typename Combine>
__device__ Acc column_reduce(Acc v, Acc* sh, Combine comb) {
  const int x = threadIdx.x, y = threadIdx.y, nx = blockDim.x;
  sh[y * nx + x] = v;
  __syncthreads();
  for (int s = blockDim.y / 2; s > 0; s >>= 1) {
    if (y < s) sh[y * nx + x] = comb(sh[y * nx + x], sh[(y + s) * nx + x]);
    __syncthreads();
  }
  const Acc r = sh[x];
  __syncthreads();
  return r;
}

// The column-tile block of the [rows, cols] reductions: 32 columns (a warp reads 32 consecutive
// values of a row) by 8 rows.
constexpr int kTileX = 32, kTileY = 8;

// ---- layer norm ----

// Block size for rows of n values: the smallest power of two >= n, 32 .. 256.
int row_threads(int64_t n) {
  int t = 32;
  while (t < kThreads && t < n) t *= 2;
  return t;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_fwd(const T* x, const T* w, const T* b, int64_t M, int64_t N, double eps, T* y, double* mean, double* rstd) {
  using A = typename AccOf<T>::type;
  __shared__ Welford<A> sh[kThreads];
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T* xr = x + r * N;
    T* yr = y + r * N;
    Welford<A> acc{0, 0, 0};
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) welford_add(acc, static_cast<A>(xr[i]));
    const Welford<A> s = block_reduce(acc, sh, WelfordCombine{});
    const double mu = static_cast<double>(s.mean);
    const double rs = 1.0 / sqrt(static_cast<double>(s.m2) / static_cast<double>(N) + eps);
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    // As the CPU: normalised in T (in float for the 16-bit types, rounded once on store).
    const A tm = static_cast<A>(mu), tr = static_cast<A>(rs);
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      A v = (static_cast<A>(xr[i]) - tm) * tr;
      if (w) v = v * static_cast<A>(w[i]);
      if (b) v = v + static_cast<A>(b[i]);
      yr[i] = static_cast<T>(v);
    }
  }
}

// dx per row: g = dy * w; dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_bwd_dx(const T* dy, const T* x, const double* mean, const double* rstd, const T* w, int64_t M, int64_t N, T* dx) {
  using A = typename AccOf<T>::type;
  __shared__ Sums2<A> sh[kThreads];
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T* xr = x + r * N;
    const T* gr = dy + r * N;
    const A mu = static_cast<A>(mean[r]), rs = static_cast<A>(rstd[r]);
    Sums2<A> acc{0, 0};
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const A g = static_cast<A>(gr[i]) * (w ? static_cast<A>(w[i]) : A(1));
      acc.s1 += g;
      acc.s2 += g * (static_cast<A>(xr[i]) - mu);
    }
    const Sums2<A> s = block_reduce(acc, sh, SumsCombine{});
    const A c1 = s.s1 / static_cast<A>(N), c2 = s.s2 * rs * rs / static_cast<A>(N);
    T* dr = dx + r * N;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const A g = static_cast<A>(gr[i]) * (w ? static_cast<A>(w[i]) : A(1));
      dr[i] = static_cast<T>(rs * (g - c1 - (static_cast<A>(xr[i]) - mu) * c2));
    }
  }
}

// dw, db partials: block (kTileX, kTileY) sums columns [blockIdx.x * 32, +32) over the rows of
// split blockIdx.y: s1 = sum(dy), s2 = sum(dy * xhat). part[split * N + col].
template <typename T>
__global__ void __launch_bounds__(kThreads) layer_norm_bwd_wb_part(const T* dy, const T* x, const double* mean, const double* rstd, int64_t M,
                                                                   int64_t N, int64_t rows_per_split, Sums2<typename AccOf<T>::type>* part) {
  using A = typename AccOf<T>::type;
  __shared__ Sums2<A> sh[kTileX * kTileY];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileX + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t r1 = r0 + rows_per_split < M ? r0 + rows_per_split : M;
  Sums2<A> acc{0, 0};
  if (col < N) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileY) {
      const A g = static_cast<A>(dy[r * N + col]);
      acc.s1 += g;
      acc.s2 += g * (static_cast<A>(x[r * N + col]) - static_cast<A>(mean[r])) * static_cast<A>(rstd[r]);
    }
  }
  const Sums2<A> s = column_reduce(acc, sh, SumsCombine{});
  if (threadIdx.y == 0 && col < N) part[static_cast<int64_t>(blockIdx.y) * N + col] = s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_bwd_wb_final(const Sums2<typename AccOf<T>::type>* part, int64_t splits, int64_t N, T* dw, T* db) {
  for (int64_t col = global_thread(); col < N; col += grid_threads()) {
    double s1 = 0, s2 = 0;
    for (int64_t k = 0; k < splits; ++k) {
      s1 += static_cast<double>(part[k * N + col].s1);
      s2 += static_cast<double>(part[k * N + col].s2);
    }
    if (dw) dw[col] = static_cast<T>(s2);
    if (db) db[col] = static_cast<T>(s1);
  }
}

// ---- batch norm ----
//
// x is [B, C, L]. With L > 1 a block takes one channel (blockIdx.x) and a contiguous part (split
// blockIdx.y) of its B * L values, its threads walking along L (coalesced). With L == 1 ([B, C]
// input) a channel's values are C apart, so a block takes 32 channels by a range of rows instead
// (a warp reads 32 consecutive channels of one row). Partials part[c * splits + split] are then
// combined per channel by a *_final kernel.

// Per-channel reduction of values f(b, c, offset) over a channel's elements.
template <typename Acc, typename Add, typename Combine>
__global__ void __launch_bounds__(kThreads)
    channel_part_rows(int64_t B, int64_t C, int64_t L, int64_t per_split, Add add, Combine comb, Acc identity, Acc* part) {
  __shared__ Acc sh[kThreads];
  const int64_t c = blockIdx.x, total = B * L;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * per_split;
  const int64_t j1 = j0 + per_split < total ? j0 + per_split : total;
  Acc acc = identity;
  // Row by row of the channel's [B, L] values (no division per element).
  for (int64_t b = j0 / L; b * L < j1; ++b) {
    const int64_t l0 = j0 - b * L > 0 ? j0 - b * L : 0, l1 = j1 - b * L < L ? j1 - b * L : L;
    const int64_t row = (b * C + c) * L;
    for (int64_t l = l0 + threadIdx.x; l < l1; l += blockDim.x) add(acc, c, row + l);
  }
  const Acc s = block_reduce(acc, sh, comb);
  if (threadIdx.x == 0) part[c * gridDim.y + blockIdx.y] = s;
}

template <typename Acc, typename Add, typename Combine>
__global__ void __launch_bounds__(kThreads)
    channel_part_cols(int64_t B, int64_t C, int64_t per_split, Add add, Combine comb, Acc identity, Acc* part) {
  __shared__ Acc sh[kTileX * kTileY];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileX + threadIdx.x;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * per_split;
  const int64_t b1 = b0 + per_split < B ? b0 + per_split : B;
  Acc acc = identity;
  if (c < C)
    for (int64_t b = b0 + threadIdx.y; b < b1; b += kTileY) add(acc, c, b * C + c);
  const Acc s = column_reduce(acc, sh, comb);
  if (threadIdx.y == 0 && c < C) part[c * gridDim.y + blockIdx.y] = s;
}

template <typename T>
struct StatsAdd {
  const T* x;
  __device__ DP_INLINE void operator()(Welford<typename AccOf<T>::type>& acc, int64_t, int64_t off) const {
    welford_add(acc, static_cast<typename AccOf<T>::type>(x[off]));
  }
};

template <typename T>
struct GradSumsAdd {  // s1 += dy, s2 += dy * (x - mean[c])
  const T* dy;
  const T* x;
  const double* mean;
  __device__ DP_INLINE void operator()(Sums2<typename AccOf<T>::type>& acc, int64_t c, int64_t off) const {
    using A = typename AccOf<T>::type;
    const A g = static_cast<A>(dy[off]);
    acc.s1 += g;
    acc.s2 += g * (static_cast<A>(x[off]) - static_cast<A>(mean[c]));
  }
};

// Runs the channel reduction of `add` over x [B, C, L] into part[C * splits] (a scratch tensor the
// caller keeps alive until the kernels that read it are queued).
template <typename Acc, typename Add, typename Combine>
Tensor channel_partials(const Tensor& like, int64_t B, int64_t C, int64_t L, Add add, Combine comb, Acc identity, int64_t& splits) {
  const Launch ln = launch_on(like);
  const int sms = detail::multiprocessor_count(ln.dev);
  const int64_t count = B * L;
  const int64_t tiles = L == 1 ? (C + kTileX - 1) / kTileX : C;
  splits = reduction_splits(L == 1 ? count * kTileX : count, tiles, sms);
  Tensor part = make_empty({static_cast<int64_t>(C * splits * sizeof(Acc))}, kUInt8, like.device());
  Acc* pp = static_cast<Acc*>(part.data_ptr());
  if (L == 1) {
    const int64_t per = (B + splits - 1) / splits;
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
    channel_part_cols<<<grid, dim3(kTileX, kTileY), 0, ln.stream>>>(B, C, per, add, comb, identity, pp);
  } else {
    const int64_t per = (count + splits - 1) / splits;
    const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(splits));
    channel_part_rows<<<grid, kThreads, 0, ln.stream>>>(B, C, L, per, add, comb, identity, pp);
  }
  DP_CUDA_CHECK(cudaGetLastError());
  return part;
}

template <typename A>
__global__ void __launch_bounds__(kThreads) bn_stats_final(const Welford<A>* part, int64_t splits, int64_t C, double* mean, double* var) {
  for (int64_t c = global_thread(); c < C; c += grid_threads()) {
    Welford<double> s{0, 0, 0};
    for (int64_t k = 0; k < splits; ++k) {
      const Welford<A>& p = part[c * splits + k];
      s = welford_combine(s, Welford<double>{static_cast<double>(p.n), static_cast<double>(p.mean), static_cast<double>(p.m2)});
    }
    mean[c] = s.mean;
    var[c] = s.m2 / s.n;
  }
}

// dw = sum(dy * (x - mean)) * invstd, db = sum(dy); coef[c] = {a, p, k} for dx =
// (dy - a - (x - mean) * p) * k (a, p zero in eval: the statistics were constants).
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads) bn_bwd_final(const Sums2<A>* part, int64_t splits, int64_t C, double inv_m, const double* invstd,
                                                         const T* w, bool training, T* dw, T* db, double* coef) {
  for (int64_t c = global_thread(); c < C; c += grid_threads()) {
    double s1 = 0, s2 = 0;
    for (int64_t k = 0; k < splits; ++k) {
      s1 += static_cast<double>(part[c * splits + k].s1);
      s2 += static_cast<double>(part[c * splits + k].s2);
    }
    const double is = invstd[c];
    if (dw) dw[c] = static_cast<T>(s2 * is);
    if (db) db[c] = static_cast<T>(s1);
    if (coef) {
      coef[3 * c] = training ? s1 * inv_m : 0.0;
      coef[3 * c + 1] = training ? s2 * is * is * inv_m : 0.0;
      coef[3 * c + 2] = is * (w ? static_cast<double>(w[c]) : 1.0);
    }
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) bn_bwd_dx(const T* dy, const T* x, const double* mean, const double* coef, I n, I C, I L, T* dx) {
  using A = typename AccOf<T>::type;
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I i = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const I c = (i / L) % C;
    const A a = static_cast<A>(coef[3 * c]), p = static_cast<A>(coef[3 * c + 1]), k = static_cast<A>(coef[3 * c + 2]);
    dx[i] = static_cast<T>((static_cast<A>(dy[i]) - a - (static_cast<A>(x[i]) - static_cast<A>(mean[c])) * p) * k);
  }
}

// y = (x - mean) * scale + shift, in T with scale = invstd * w and shift = b, as the CPU (in float
// for the 16-bit types, rounded once on store).
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads)
    bn_apply(const T* x, const double* mean, const double* invstd, const T* w, const T* b, I n, I C, I L, T* y) {
  using A = typename AccOf<T>::type;
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I i = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const I c = (i / L) % C;
    const A m = static_cast<A>(mean[c]);
    const A sc = static_cast<A>(invstd[c] * (w ? static_cast<double>(w[c]) : 1.0));
    const A sh = b ? static_cast<A>(b[c]) : A(0);
    y[i] = static_cast<T>((static_cast<A>(x[i]) - m) * sc + sh);
  }
}

// Calls f.template operator()<I>() with uint32_t when n elements can be indexed in 32 bits (the
// per-element channel division is then several times cheaper), else int64_t.
template <typename F>
void dispatch_index(int64_t n, F&& f) {
  if (n < (int64_t{1} << 31))
    f.template operator()<uint32_t>();
  else
    f.template operator()<int64_t>();
}

__global__ void __launch_bounds__(kThreads) bn_invstd(double* v, int64_t C, double eps, bool zero) {
  for (int64_t c = global_thread(); c < C; c += grid_threads()) v[c] = zero ? 0.0 : 1.0 / sqrt(v[c] + eps);
}

template <typename R>
__global__ void __launch_bounds__(kThreads) bn_running(R* run, const double* stat, int64_t C, double factor, double momentum) {
  for (int64_t c = global_thread(); c < C; c += grid_threads()) {
    const double v = (1.0 - momentum) * backend::convert<double>(run[c]) + momentum * stat[c] * factor;
    run[c] = backend::convert<R>(v);
  }
}

}  // namespace

// ================================================================= entry points

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dGeometry& g) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index);
  const Launch ln = launch_on(out);
  dispatch_pool(input.dtype(), "max_pool2d", g, 1, [&]<typename T, typename I>() {
    max_pool_fwd<T, I>
        <<<grid_for(n, ln.dev), kThreads, 0, ln.stream>>>(cptr<T>(input), mptr<T>(out), mptr<int64_t>(indices), static_cast<I>(n), dims_of<I>(g));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void max_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices, const Pool2dGeometry& g) {
  const int64_t n = grad_input.numel();
  if (n == 0) return;
  DeviceGuard guard(grad_input.device().index);
  const Launch ln = launch_on(grad_input);
  dispatch_pool(grad_output.dtype(), "max_pool2d backward", g, 1, [&]<typename T, typename I>() {
    max_pool_bwd<T, I><<<grid_for(n, ln.dev), kThreads, 0, ln.stream>>>(cptr<T>(grad_output), cptr<int64_t>(indices), mptr<T>(grad_input),
                                                                        static_cast<I>(n), dims_of<I>(g));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void avg_pool2d_kernel(const Tensor& out, const Tensor& input, const Pool2dGeometry& g, bool count_include_pad,
                       std::optional<int64_t> divisor_override) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index);
  const Launch ln = launch_on(out);
  const int64_t div = divisor_override.value_or(1);
  dispatch_pool(input.dtype(), "avg_pool2d", g, div, [&]<typename T, typename I>() {
    avg_pool_fwd<T, I><<<grid_for(n, ln.dev), kThreads, 0, ln.stream>>>(cptr<T>(input), mptr<T>(out), static_cast<I>(n), dims_of<I>(g),
                                                                        count_include_pad, divisor_override.has_value(), static_cast<I>(div));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g, bool count_include_pad,
                                std::optional<int64_t> divisor_override) {
  const int64_t n = grad_input.numel();
  if (n == 0) return;
  DeviceGuard guard(grad_input.device().index);
  const Launch ln = launch_on(grad_input);
  const int64_t div = divisor_override.value_or(1);
  dispatch_pool(grad_output.dtype(), "avg_pool2d backward", g, div, [&]<typename T, typename I>() {
    avg_pool_bwd<T, I><<<grid_for(n, ln.dev), kThreads, 0, ln.stream>>>(cptr<T>(grad_output), mptr<T>(grad_input), static_cast<I>(n), dims_of<I>(g),
                                                                        count_include_pad, divisor_override.has_value(), static_cast<I>(div));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& input, const Pool2dGeometry& g) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index);
  const Launch ln = launch_on(out);
  dispatch_pool(input.dtype(), "adaptive_avg_pool2d", g, 1, [&]<typename T, typename I>() {
    adaptive_fwd<T, I><<<grid_for(n, ln.dev), kThreads, 0, ln.stream>>>(cptr<T>(input), mptr<T>(out), static_cast<I>(n), dims_of<I>(g));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_output, const Pool2dGeometry& g) {
  const int64_t n = grad_input.numel();
  if (n == 0) return;
  DeviceGuard guard(grad_input.device().index);
  const Launch ln = launch_on(grad_input);
  dispatch_pool(grad_output.dtype(), "adaptive_avg_pool2d backward", g, 1, [&]<typename T, typename I>() {
    adaptive_bwd<T, I><<<grid_for(n, ln.dev), kThreads, 0, ln.stream>>>(cptr<T>(grad_output), mptr<T>(grad_input), static_cast<I>(n), dims_of<I>(g));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, int64_t M, int64_t N, double eps, const Tensor& out, const Tensor& mean,
                       const Tensor& rstd) {
  if (M == 0) return;
  DeviceGuard guard(x.device().index);
  if (N == 0) {  // no values: the CPU's statistics are 0 * NaN
    fill_kernel(mean, Scalar(NAN));
    fill_kernel(rstd, Scalar(NAN));
    return;
  }
  const Launch ln = launch_on(x);
  const unsigned blocks = static_cast<unsigned>(M < 65535 ? M : 65535);
  dispatch_fp(x.dtype(), "layer_norm", [&]<typename T>() {
    layer_norm_fwd<T><<<blocks, row_threads(N), 0, ln.stream>>>(cptr<T>(x), cptr<T>(w), cptr<T>(b), M, N, eps, mptr<T>(out), mptr<double>(mean),
                                                                mptr<double>(rstd));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w, int64_t M, int64_t N,
                                const Tensor& dx, const Tensor& dw, const Tensor& db) {
  if (N == 0) return;
  DeviceGuard guard(x.device().index);
  if (M == 0) {  // no rows: zero weight and bias gradients, as the CPU's empty sums
    if (dw.defined()) fill_kernel(dw, Scalar(0.0));
    if (db.defined()) fill_kernel(db, Scalar(0.0));
    return;
  }
  const Launch ln = launch_on(x);
  dispatch_fp(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    using A = typename AccOf<T>::type;
    if (dx.defined()) {
      const unsigned blocks = static_cast<unsigned>(M < 65535 ? M : 65535);
      layer_norm_bwd_dx<T>
          <<<blocks, row_threads(N), 0, ln.stream>>>(cptr<T>(dy), cptr<T>(x), cptr<double>(mean), cptr<double>(rstd), cptr<T>(w), M, N, mptr<T>(dx));
      DP_CUDA_CHECK(cudaGetLastError());
    }
    if (!dw.defined() && !db.defined()) return;
    const int sms = detail::multiprocessor_count(ln.dev);
    const int64_t tiles = (N + kTileX - 1) / kTileX;
    const int64_t splits = reduction_splits(M * kTileX, tiles, sms);
    const int64_t per = (M + splits - 1) / splits;
    Tensor part = make_empty({static_cast<int64_t>(splits * N * sizeof(Sums2<A>))}, kUInt8, x.device());
    Sums2<A>* pp = static_cast<Sums2<A>*>(part.data_ptr());
    layer_norm_bwd_wb_part<T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), dim3(kTileX, kTileY), 0, ln.stream>>>(
        cptr<T>(dy), cptr<T>(x), cptr<double>(mean), cptr<double>(rstd), M, N, per, pp);
    DP_CUDA_CHECK(cudaGetLastError());
    layer_norm_bwd_wb_final<T><<<grid_for(N, ln.dev), kThreads, 0, ln.stream>>>(pp, splits, N, mptr<T>(dw), mptr<T>(db));
    DP_CUDA_CHECK(cudaGetLastError());
  });
}

void batch_norm_stats_kernel(const Tensor& x, int64_t B, int64_t C, int64_t L, const Tensor& mean, const Tensor& var) {
  if (C == 0 || B * L == 0) return;  // the op handles an empty batch itself
  DeviceGuard guard(x.device().index);
  const Launch ln = launch_on(x);
  dispatch_fp(x.dtype(), "batch_norm", [&]<typename T>() {
    using A = typename AccOf<T>::type;
    int64_t splits = 1;
    Tensor part = channel_partials(x, B, C, L, StatsAdd<T>{cptr<T>(x)}, WelfordCombine{}, Welford<A>{0, 0, 0}, splits);
    bn_stats_final<A><<<grid_for(C, ln.dev), kThreads, 0, ln.stream>>>(static_cast<const Welford<A>*>(part.data_ptr()), splits, C, mptr<double>(mean),
                                                                       mptr<double>(var));
    DP_CUDA_CHECK(cudaGetLastError());
  });
}

void batch_norm_apply_kernel(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& b, int64_t B, int64_t C,
                             int64_t L, const Tensor& out) {
  const int64_t n = B * C * L;
  if (n == 0) return;
  DeviceGuard guard(x.device().index);
  const Launch ln = launch_on(x);
  dispatch_fp(x.dtype(), "batch_norm", [&]<typename T>() {
    dispatch_index(n, [&]<typename I>() {
      bn_apply<T, I><<<grid_for(n, ln.dev), kThreads, 0, ln.stream>>>(cptr<T>(x), cptr<double>(mean), cptr<double>(invstd), cptr<T>(w), cptr<T>(b),
                                                                      static_cast<I>(n), static_cast<I>(C), static_cast<I>(L), mptr<T>(out));
    });
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, bool training,
                                int64_t B, int64_t C, int64_t L, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  if (C == 0) return;
  DeviceGuard guard(x.device().index);
  if (B * L == 0) {  // empty batch: zero sums, as the CPU
    if (dw.defined()) fill_kernel(dw, Scalar(0.0));
    if (db.defined()) fill_kernel(db, Scalar(0.0));
    return;
  }
  const Launch ln = launch_on(x);
  const bool need_sums = dw.defined() || db.defined() || (dx.defined() && training);
  const int64_t n = B * C * L;
  dispatch_fp(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using A = typename AccOf<T>::type;
    int64_t splits = 0;
    Tensor part;
    if (need_sums)
      part = channel_partials(x, B, C, L, GradSumsAdd<T>{cptr<T>(dy), cptr<T>(x), cptr<double>(mean)}, SumsCombine{}, Sums2<A>{0, 0}, splits);
    Tensor coef = dx.defined() ? make_empty({3 * C}, kFloat64, x.device()) : Tensor();
    bn_bwd_final<T, A><<<grid_for(C, ln.dev), kThreads, 0, ln.stream>>>(part.defined() ? static_cast<const Sums2<A>*>(part.data_ptr()) : nullptr,
                                                                        splits, C, 1.0 / static_cast<double>(B * L), cptr<double>(invstd), cptr<T>(w),
                                                                        training, mptr<T>(dw), mptr<T>(db), mptr<double>(coef));
    DP_CUDA_CHECK(cudaGetLastError());
    if (dx.defined()) {
      dispatch_index(n, [&]<typename I>() {
        bn_bwd_dx<T, I><<<grid_for(n, ln.dev), kThreads, 0, ln.stream>>>(cptr<T>(dy), cptr<T>(x), cptr<double>(mean), cptr<double>(coef),
                                                                         static_cast<I>(n), static_cast<I>(C), static_cast<I>(L), mptr<T>(dx));
      });
      DP_CUDA_CHECK(cudaGetLastError());
    }
  });
}

void batch_norm_invstd_kernel(const Tensor& v, double eps, bool zero) {
  const int64_t C = v.numel();
  if (C == 0) return;
  DeviceGuard guard(v.device().index);
  const Launch ln = launch_on(v);
  bn_invstd<<<grid_for(C, ln.dev), kThreads, 0, ln.stream>>>(mptr<double>(v), C, eps, zero);
  DP_CUDA_CHECK(cudaGetLastError());
}

void batch_norm_update_running_kernel(const Tensor& running, const Tensor& stat, double factor, double momentum) {
  const int64_t C = running.numel();
  if (C == 0) return;
  DeviceGuard guard(running.device().index);
  const Launch ln = launch_on(running);
  backend::dispatch_floating(running.dtype(), "batch_norm", [&]<typename R>() {
    bn_running<R><<<grid_for(C, ln.dev), kThreads, 0, ln.stream>>>(mptr<R>(running), cptr<double>(stat), C, factor, momentum);
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dp::backend::cuda
