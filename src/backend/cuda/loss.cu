// CUDA kernels of the loss ops (see cuda/loss.h): element-wise losses (one thread per element,
// weights broadcast through an OffsetCalculator), nll_loss (one thread per sample) and
// cross_entropy (one warp per sample for [N, C] inputs, reading a row with coalesced loads; one
// thread per sample when S > 1, where neighbouring samples are neighbours in memory). The
// log-sum-exp is computed in one pass with an online maximum. Reduced modes write one partial sum
// per block and a one-block kernel adds them in order (deterministic, no atomics).
#include <cuda_runtime.h>
#include <cmath>
#include "backend/dispatch.h"
#include "backend/cuda/index.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/loss.h"

namespace dp::backend::cuda {

using detail::kThreads;
using detail::OffsetCalculator;

namespace {

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// ---- device helpers ----

__device__ DP_INLINE float d_exp(float x) { return expf(x); }
__device__ DP_INLINE double d_exp(double x) { return exp(x); }
__device__ DP_INLINE float d_log(float x) { return logf(x); }
__device__ DP_INLINE double d_log(double x) { return log(x); }
__device__ DP_INLINE float d_log1p(float x) { return log1pf(x); }
__device__ DP_INLINE double d_log1p(double x) { return log1p(x); }
__device__ DP_INLINE float d_abs(float x) { return fabsf(x); }
__device__ DP_INLINE double d_abs(double x) { return fabs(x); }
template <typename A>
__device__ DP_INLINE A d_neg_inf() {
  return -static_cast<A>(INFINITY);
}

template <typename A, typename T>
__device__ DP_INLINE A ld(const T* p, int64_t i) {
  return static_cast<A>(p[i]);  // Half / BFloat16 convert through float
}

template <typename T, typename A>
__device__ DP_INLINE T st(A v) {
  if constexpr (std::is_same_v<T, A>)
    return v;
  else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    return static_cast<T>(v);
  else
    return T(static_cast<float>(v));
}

template <typename A>
struct Pair {
  A a, b;
};

// Sum over the warp, in the same tree order every run; every lane gets the result.
template <typename A>
__device__ DP_INLINE A warp_sum(A v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// Thread 0 gets the block's sum (blockDim.x a multiple of 32, at most 1024). Every thread calls it.
template <typename A>
__device__ Pair<A> block_sum(Pair<A> v) {
  __shared__ A sa[32], sb[32];
  v.a = warp_sum(v.a);
  v.b = warp_sum(v.b);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sa[warp] = v.a;
    sb[warp] = v.b;
  }
  __syncthreads();
  if (warp == 0) {
    const int nw = static_cast<int>(blockDim.x >> 5);
    v.a = lane < nw ? sa[lane] : A(0);
    v.b = lane < nw ? sb[lane] : A(0);
    v.a = warp_sum(v.a);
    v.b = warp_sum(v.b);
  }
  return v;
}

// The end of a reducing kernel: block b's sums into partials[2b], partials[2b + 1].
template <typename A>
__device__ DP_INLINE void write_partial(Pair<A> v, A* partials) {
  v = block_sum(v);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = v.a;
    partials[2 * blockIdx.x + 1] = v.b;
  }
}

// out[0] = sum of the partial a's times scale, divided by the sum of the b's with by_weight;
// weight_out (optional) gets the b's sum. One block of kThreads.
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads) finish_kernel(const A* partials, int blocks, A scale, int by_weight, T* out, A* weight_out) {
  Pair<A> v{A(0), A(0)};
  for (int i = threadIdx.x; i < blocks; i += kThreads) {
    v.a += partials[2 * i];
    v.b += partials[2 * i + 1];
  }
  v = block_sum(v);
  if (threadIdx.x == 0) {
    A r = v.a * scale;
    if (by_weight) r /= v.b;
    *out = st<T>(r);
    if (weight_out != nullptr) *weight_out = v.b;
  }
}

// The incoming gradient: G_i = g[i] or the scaled, divided g[0].
template <typename T, typename A>
struct GradIn {
  const T* g;
  int per_sample;
  A scale;
  const A* divisor;
  __device__ DP_INLINE A base() const {
    if (per_sample) return A(0);
    A v = ld<A>(g, 0) * scale;
    if (divisor != nullptr) v /= *divisor;
    return v;
  }
  __device__ DP_INLINE A at(int64_t i, A base) const { return per_sample ? ld<A>(g, i) * scale : base; }
};

// ---- element-wise losses (formulas of src/backend/cpu/loss_pointwise.cpp) ----

using backend::kBceEps;

template <typename A>
__device__ DP_INLINE A clamp_log(A v) {
  return v < A(-100) ? A(-100) : v;
}
template <typename A>
__device__ DP_INLINE A softplus_neg(A x) {
  return (x < A(0) ? -x : A(0)) + d_log1p(d_exp(-d_abs(x)));
}

template <PointwiseKind K, typename A>
__device__ DP_INLINE A elem_loss(A x, A t, A pw) {
  if constexpr (K == PointwiseKind::Mse) {
    const A d = x - t;
    return d * d;
  } else if constexpr (K == PointwiseKind::L1) {
    return d_abs(x - t);
  } else if constexpr (K == PointwiseKind::Bce) {
    return (t - A(1)) * clamp_log(d_log1p(-x)) - t * clamp_log(d_log(x));
  } else {
    return (A(1) - t) * x + (A(1) + (pw - A(1)) * t) * softplus_neg(x);
  }
}

template <PointwiseKind K, typename A>
__device__ DP_INLINE A elem_dx(A x, A t, A pw) {
  if constexpr (K == PointwiseKind::Mse) {
    return A(2) * (x - t);
  } else if constexpr (K == PointwiseKind::L1) {
    const A d = x - t;
    return static_cast<A>(d > A(0)) - static_cast<A>(d < A(0));
  } else if constexpr (K == PointwiseKind::Bce) {
    const A den = (A(1) - x) * x;
    return (x - t) / (den < A(kBceEps) ? A(kBceEps) : den);
  } else {
    const A s = A(1) / (A(1) + d_exp(-x));
    return (A(1) + (pw - A(1)) * t) * s - pw * t;
  }
}

template <PointwiseKind K, typename A>
__device__ DP_INLINE A elem_dt(A x, A t, A pw) {
  if constexpr (K == PointwiseKind::Mse || K == PointwiseKind::L1) {
    return -elem_dx<K, A>(x, t, pw);
  } else if constexpr (K == PointwiseKind::Bce) {
    return d_log1p(-x) - d_log(x);
  } else {
    return -x + (pw - A(1)) * softplus_neg(x);
  }
}

// The broadcast side operands (weight, pos_weight): byte offsets from x's linear index.
struct Sides {
  const char* w;
  const char* pw;
  OffsetCalculator<2, uint32_t> oc;
};

template <typename T, typename A>
__device__ DP_INLINE void side_values(const Sides& s, uint32_t i, A& wv, A& pv) {
  wv = A(1);
  pv = A(1);
  if (s.w == nullptr && s.pw == nullptr) return;
  const auto o = s.oc.get(i);
  if (s.w != nullptr) wv = static_cast<A>(*reinterpret_cast<const T*>(s.w + o.v[0]));
  if (s.pw != nullptr) pv = static_cast<A>(*reinterpret_cast<const T*>(s.pw + o.v[1]));
}

// out (None) or partials (reduced). bad: Bce's range flag.
template <PointwiseKind K, typename T>
__global__ void __launch_bounds__(kThreads)
    pointwise_forward_kernel(uint32_t n, const T* x, const T* t, Sides s, T* out, acc_t<T>* partials, int* bad) {
  using A = acc_t<T>;
  const uint32_t stride = gridDim.x * kThreads;
  A sum = 0;
  bool outside = false;
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
    A wv, pv;
    side_values<T, A>(s, i, wv, pv);
    const A xv = ld<A>(x, i), tv = ld<A>(t, i);
    if constexpr (K == PointwiseKind::Bce) outside = outside || !(xv >= A(0) && xv <= A(1));
    const A l = elem_loss<K, A>(xv, tv, pv) * wv;
    if (out != nullptr)
      out[i] = st<T>(l);
    else
      sum += l;
  }
  if (outside && bad != nullptr) *reinterpret_cast<volatile int*>(bad) = 1;
  if (partials != nullptr) write_partial(Pair<A>{sum, A(0)}, partials);
}

template <PointwiseKind K, typename T>
__global__ void __launch_bounds__(kThreads)
    pointwise_backward_kernel(uint32_t n, const T* x, const T* t, Sides s, GradIn<T, acc_t<T>> g, T* gi, T* gt) {
  using A = acc_t<T>;
  const uint32_t stride = gridDim.x * kThreads;
  const A base = g.base();
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
    A wv, pv;
    side_values<T, A>(s, i, wv, pv);
    const A xv = ld<A>(x, i), tv = ld<A>(t, i);
    const A f = g.at(i, base) * wv;
    if (gi != nullptr) gi[i] = st<T>(f * elem_dx<K, A>(xv, tv, pv));
    if (gt != nullptr) gt[i] = st<T>(f * elem_dt<K, A>(xv, tv, pv));
  }
}

// ---- nll_loss ----

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads)
    nll_forward_kernel(uint32_t ns, int64_t C, int64_t S, const T* x, const I* tg, const T* w, int64_t ignore, T* out, acc_t<T>* partials, int* bad) {
  using A = acc_t<T>;
  const uint32_t stride = gridDim.x * kThreads;
  Pair<A> sum{A(0), A(0)};
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < ns; i += stride) {
    const int64_t t = static_cast<int64_t>(tg[i]);
    const bool ok = t != ignore && t >= 0 && t < C;
    if (!ok && t != ignore && bad != nullptr) *reinterpret_cast<volatile int*>(bad) = 1;
    if (!ok) {
      if (out != nullptr) out[i] = st<T>(A(0));
      continue;
    }
    const int64_t n = i / S, s = i - n * S;
    const A wt = w != nullptr ? ld<A>(w, t) : A(1);
    const A v = -wt * ld<A>(x, (n * C + t) * S + s);
    if (out != nullptr) {
      out[i] = st<T>(v);
    } else {
      sum.a += v;
      sum.b += wt;
    }
  }
  if (partials != nullptr) write_partial(sum, partials);
}

// gi is zero-filled before.
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads)
    nll_backward_kernel(uint32_t ns, int64_t C, int64_t S, const I* tg, const T* w, int64_t ignore, GradIn<T, acc_t<T>> g, T* gi) {
  using A = acc_t<T>;
  const uint32_t stride = gridDim.x * kThreads;
  const A base = g.base();
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < ns; i += stride) {
    const int64_t t = static_cast<int64_t>(tg[i]);
    if (t == ignore || t < 0 || t >= C) continue;
    const int64_t n = i / S, s = i - n * S;
    gi[(n * C + t) * S + s] = st<T>(-(w != nullptr ? ld<A>(w, t) : A(1)) * g.at(i, base));
  }
}

// ---- cross_entropy ----

// Samples are handled by groups of L threads (32: a warp per sample, S == 1; 1: a thread per
// sample): lane runs over the classes lane, lane + L, ...
struct Groups {
  int L;
  __device__ DP_INLINE uint32_t lane() const { return L == 1 ? 0u : threadIdx.x & 31u; }
  __device__ DP_INLINE uint32_t first() const { return (blockIdx.x * kThreads + threadIdx.x) / static_cast<uint32_t>(L); }
  __device__ DP_INLINE uint32_t step() const { return gridDim.x * kThreads / static_cast<uint32_t>(L); }
  template <typename A>
  __device__ DP_INLINE A sum(A v) const {
    return L == 1 ? v : warp_sum(v);
  }
};

// Online log-sum-exp state: max m and sum of exp(x - m).
template <typename A>
struct Lse {
  A m, se;
  __device__ DP_INLINE void add(A v) {
    if (v > m) {
      se = se * d_exp(m - v) + A(1);
      m = v;
    } else if (v != d_neg_inf<A>()) {  // -inf adds 0; with m still -inf, exp(-inf - -inf) would be NaN
      se += d_exp(v - m);
    }
  }
  // Merges another lane's state (an empty one has se == 0).
  __device__ DP_INLINE void merge(A om, A ose) {
    const A M = om > m ? om : m;
    se = (se == A(0) ? A(0) : se * d_exp(m - M)) + (ose == A(0) ? A(0) : ose * d_exp(om - M));
    m = M;
  }
  __device__ DP_INLINE A value() const { return m + d_log(se); }
};

template <typename A>
__device__ DP_INLINE A group_lse(const Groups& gr, Lse<A> l) {
  if (gr.L > 1) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) l.merge(__shfl_xor_sync(0xffffffffu, l.m, d), __shfl_xor_sync(0xffffffffu, l.se, d));
  }
  return l.value();
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads)
    ce_index_forward_kernel(uint32_t ns, int64_t C, int64_t S, Groups gr, const T* x, const I* tg, const T* w, int64_t ignore, acc_t<T> keep,
                            acc_t<T> per_class, T* out, acc_t<T>* lse_out, acc_t<T>* partials, int* bad) {
  using A = acc_t<T>;
  const uint32_t lane = gr.lane();
  Pair<A> sum{A(0), A(0)};
  // The loop bound is the same for every lane of a group, so whole warps run the shuffles.
  for (uint32_t i = gr.first(); i < ns; i += gr.step()) {
    const int64_t n = i / S, s = i - n * S;
    const T* xr = x + n * C * S + s;
    Lse<A> l{d_neg_inf<A>(), A(0)};
    A sw = 0, swx = 0;  // sum_c w_c and sum_c w_c x_c, for label smoothing
    for (int64_t c = lane; c < C; c += gr.L) {
      const A v = ld<A>(xr, c * S);
      l.add(v);
      if (per_class != A(0)) {
        const A wc = w != nullptr ? ld<A>(w, c) : A(1);
        sw += wc;
        swx += wc * v;
      }
    }
    const A lse = group_lse(gr, l);
    if (per_class != A(0)) {
      sw = gr.sum(sw);
      swx = gr.sum(swx);
    }
    if (lane != 0) continue;
    lse_out[i] = lse;
    const int64_t t = static_cast<int64_t>(tg[i]);
    const bool ok = t != ignore && t >= 0 && t < C;
    if (!ok && t != ignore && bad != nullptr) *reinterpret_cast<volatile int*>(bad) = 1;
    if (!ok) {
      if (out != nullptr) out[i] = st<T>(A(0));
      continue;
    }
    const A wt = w != nullptr ? ld<A>(w, t) : A(1);
    A v = keep * wt * (lse - ld<A>(xr, t * S));
    if (per_class != A(0)) v += per_class * (lse * sw - swx);
    if (out != nullptr) {
      out[i] = st<T>(v);
    } else {
      sum.a += v;
      sum.b += wt;
    }
  }
  if (partials != nullptr) write_partial(sum, partials);
}

// gi_c = G * ((keep * w_t + per_class * sum_c w_c) * p_c - per_class * w_c - [c == t] keep * w_t).
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads)
    ce_index_backward_kernel(uint32_t ns, int64_t C, int64_t S, Groups gr, const T* x, const I* tg, const T* w, int64_t ignore, acc_t<T> keep,
                             acc_t<T> per_class, const acc_t<T>* lse_in, GradIn<T, acc_t<T>> g, T* gi) {
  using A = acc_t<T>;
  const uint32_t lane = gr.lane();
  const A base = g.base();
  for (uint32_t i = gr.first(); i < ns; i += gr.step()) {
    const int64_t n = i / S, s = i - n * S;
    const int64_t off = n * C * S + s;
    const int64_t t = static_cast<int64_t>(tg[i]);
    if (t == ignore || t < 0 || t >= C) {
      for (int64_t c = lane; c < C; c += gr.L) gi[off + c * S] = st<T>(A(0));
      continue;
    }
    A wsum = static_cast<A>(C);
    if (per_class != A(0) && w != nullptr) {
      wsum = 0;
      for (int64_t c = lane; c < C; c += gr.L) wsum += ld<A>(w, c);
      wsum = gr.sum(wsum);
    }
    const A G = g.at(i, base), lse = lse_in[i];
    const A wt = w != nullptr ? ld<A>(w, t) : A(1);
    const A a = G * (keep * wt + per_class * wsum), b = G * per_class, ft = G * keep * wt;
    for (int64_t c = lane; c < C; c += gr.L) {
      const A wc = w != nullptr ? ld<A>(w, c) : A(1);
      A v = a * d_exp(ld<A>(x, off + c * S) - lse) - b * wc;
      if (c == t) v -= ft;
      gi[off + c * S] = st<T>(v);
    }
  }
}

// Per sample: loss = lse * sum_c w_c q_c - sum_c w_c q_c x_c, q = keep * target + per_class.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ce_prob_forward_kernel(uint32_t ns, int64_t C, int64_t S, Groups gr, const T* x, const T* tq, const T* w, acc_t<T> keep, acc_t<T> per_class,
                           T* out, acc_t<T>* lse_out, acc_t<T>* rs_out, acc_t<T>* partials) {
  using A = acc_t<T>;
  const uint32_t lane = gr.lane();
  A sum = 0;
  for (uint32_t i = gr.first(); i < ns; i += gr.step()) {
    const int64_t n = i / S, s = i - n * S;
    const int64_t off = n * C * S + s;
    Lse<A> l{d_neg_inf<A>(), A(0)};
    A swq = 0, swqx = 0;
    for (int64_t c = lane; c < C; c += gr.L) {
      const A v = ld<A>(x, off + c * S);
      l.add(v);
      const A wq = (w != nullptr ? ld<A>(w, c) : A(1)) * (keep * ld<A>(tq, off + c * S) + per_class);
      swq += wq;
      swqx += wq * v;
    }
    const A lse = group_lse(gr, l);
    swq = gr.sum(swq);
    swqx = gr.sum(swqx);
    if (lane != 0) continue;
    lse_out[i] = lse;
    rs_out[i] = swq;
    const A v = lse * swq - swqx;
    if (out != nullptr)
      out[i] = st<T>(v);
    else
      sum += v;
  }
  if (partials != nullptr) write_partial(Pair<A>{sum, A(0)}, partials);
}

// gi_c = G * (rs * p_c - w_c q_c), gt_c = G * keep * w_c * (lse - x_c).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ce_prob_backward_kernel(uint32_t ns, int64_t C, int64_t S, Groups gr, const T* x, const T* tq, const T* w, acc_t<T> keep, acc_t<T> per_class,
                            const acc_t<T>* lse_in, const acc_t<T>* rs_in, GradIn<T, acc_t<T>> g, T* gi, T* gt) {
  using A = acc_t<T>;
  const uint32_t lane = gr.lane();
  const A base = g.base();
  for (uint32_t i = gr.first(); i < ns; i += gr.step()) {
    const int64_t n = i / S, s = i - n * S;
    const int64_t off = n * C * S + s;
    const A G = g.at(i, base), lse = lse_in[i], a = G * rs_in[i];
    for (int64_t c = lane; c < C; c += gr.L) {
      const A wc = w != nullptr ? ld<A>(w, c) : A(1);
      const A xv = ld<A>(x, off + c * S);
      if (gi != nullptr) gi[off + c * S] = st<T>(a * d_exp(xv - lse) - G * wc * (keep * ld<A>(tq, off + c * S) + per_class));
      if (gt != nullptr) gt[off + c * S] = st<T>(G * keep * wc * (lse - xv));
    }
  }
}

// ---- host side ----

void check_count(const char* op, int64_t n) {
  DP_CHECK(n <= INT32_MAX, NotImplementedError, op, ": CUDA loss kernels take at most 2^31 - 1 elements (or samples) per call, got ", n);
}

template <typename T>
const T* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <typename T>
T* mptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Float dtypes the loss kernels take.
template <typename F>
void dispatch_loss(DType d, const char* op, F&& f) {
  backend::dispatch_floating(d, op, std::forward<F>(f));
}

template <typename F>
void dispatch_target(DType d, F&& f) {
  if (d == kUInt8)
    f.template operator()<uint8_t>();
  else
    f.template operator()<int64_t>();
}

// weight / pos_weight offsets over x's shape (byte strides, 0 where they broadcast or are absent).
Sides make_sides(const Tensor& x, const Tensor& w, const Tensor& pw) {
  Sides s;
  s.w = w.defined() ? static_cast<const char*>(w.data_ptr()) : nullptr;
  s.pw = pw.defined() ? static_cast<const char*>(pw.data_ptr()) : nullptr;
  const int nd = static_cast<int>(x.dim());
  DP_CHECK(nd <= 64, NotImplementedError, "loss: ", nd, " dims are more than the CUDA loss kernels support (64)");
  int64_t st[2][64] = {};
  const Tensor* sides[2] = {&w, &pw};
  for (int k = 0; k < 2; ++k) {
    const Tensor& t = *sides[k];
    if (!t.defined()) continue;
    const int td = static_cast<int>(t.dim());
    for (int d = 0; d < td; ++d) {
      const int od = d + nd - td;
      st[k][od] = t.sizes()[d] == 1 ? 0 : t.strides()[d] * static_cast<int64_t>(t.element_size());
    }
  }
  const int64_t* rows[2] = {st[0], st[1]};
  s.oc = detail::make_offset_calculator<2, uint32_t>(nd, x.sizes().data(), rows);
  return s;
}

template <typename T>
GradIn<T, acc_t<T>> grad_in(const LossGrad& g) {
  return GradIn<T, acc_t<T>>{cptr<T>(g.g), g.per_sample ? 1 : 0, static_cast<acc_t<T>>(g.scale), cptr<acc_t<T>>(g.divisor)};
}

// What a forward launch needs: stream, grid, partial sums for reduced modes.
struct Plan {
  int dev;
  cudaStream_t stream;
  unsigned blocks;
  Tensor partials;
};

Plan plan_for(const Tensor& x, int64_t threads_needed, bool reduced) {
  Plan p;
  p.dev = x.device().index;
  p.stream = current_stream(p.dev).handle();
  p.blocks = detail::grid_for(threads_needed, p.dev);
  if (reduced) p.partials = make_empty({2 * static_cast<int64_t>(p.blocks)}, loss_acc_dtype(x.dtype()), x.device());
  return p;
}

// Writes the 0-dim result from the partials (a zero-element input has no partials: sum 0).
template <typename T>
void finish(const Plan& p, bool launched, const Tensor& out, double scale, bool by_weight, const Tensor& weight_out) {
  using A = acc_t<T>;
  finish_kernel<T, A><<<1, kThreads, 0, p.stream>>>(cptr<A>(p.partials), launched ? static_cast<int>(p.blocks) : 0, static_cast<A>(scale),
                                                    by_weight ? 1 : 0, mptr<T>(out), mptr<A>(weight_out));
}

Groups groups_for(const ClassShape& cs) { return Groups{cs.s == 1 ? 32 : 1}; }

// eps / C, and exactly 0 without smoothing (also for C == 0, where eps / C would be NaN).
template <typename A>
A smoothing_per_class(double eps, int64_t c) {
  return eps > 0 ? static_cast<A>(eps / static_cast<double>(c)) : A(0);
}

}  // namespace

bool pointwise_loss_forward_kernel(PointwiseKind k, const Tensor& out, bool reduced, double scale, const Tensor& x, const Tensor& t, const Tensor& w,
                                   const Tensor& pw) {
  const int64_t n = x.numel();
  check_count("loss", n);
  DeviceGuard guard(x.device().index);
  const Plan p = plan_for(x, n, reduced);
  detail::HostFlag flag;
  int* bad = k == PointwiseKind::Bce ? flag.device_ptr(p.stream) : nullptr;
  const Sides s = make_sides(x, w, pw);
  dispatch_loss(x.dtype(), "loss", [&]<typename T>() {
    using A = acc_t<T>;
    auto launch = [&]<PointwiseKind K>() {
      if (n > 0)
        pointwise_forward_kernel<K, T><<<p.blocks, kThreads, 0, p.stream>>>(static_cast<uint32_t>(n), cptr<T>(x), cptr<T>(t), s,
                                                                            reduced ? nullptr : mptr<T>(out), mptr<A>(p.partials), bad);
    };
    switch (k) {
      case PointwiseKind::Mse:
        launch.template operator()<PointwiseKind::Mse>();
        break;
      case PointwiseKind::L1:
        launch.template operator()<PointwiseKind::L1>();
        break;
      case PointwiseKind::Bce:
        launch.template operator()<PointwiseKind::Bce>();
        break;
      case PointwiseKind::BceLogits:
        launch.template operator()<PointwiseKind::BceLogits>();
        break;
    }
    if (reduced) finish<T>(p, n > 0, out, scale, false, Tensor());
  });
  DP_CUDA_CHECK(cudaGetLastError());
  return flag.raised();
}

void pointwise_loss_backward_kernel(PointwiseKind k, const Tensor& gi, const Tensor& gt, const LossGrad& g, const Tensor& x, const Tensor& t,
                                    const Tensor& w, const Tensor& pw) {
  const int64_t n = x.numel();
  if (n == 0) return;
  check_count("loss backward", n);
  DeviceGuard guard(x.device().index);
  const Plan p = plan_for(x, n, false);
  const Sides s = make_sides(x, w, pw);
  dispatch_loss(x.dtype(), "loss backward", [&]<typename T>() {
    auto launch = [&]<PointwiseKind K>() {
      pointwise_backward_kernel<K, T>
          <<<p.blocks, kThreads, 0, p.stream>>>(static_cast<uint32_t>(n), cptr<T>(x), cptr<T>(t), s, grad_in<T>(g), mptr<T>(gi), mptr<T>(gt));
    };
    switch (k) {
      case PointwiseKind::Mse:
        launch.template operator()<PointwiseKind::Mse>();
        break;
      case PointwiseKind::L1:
        launch.template operator()<PointwiseKind::L1>();
        break;
      case PointwiseKind::Bce:
        launch.template operator()<PointwiseKind::Bce>();
        break;
      case PointwiseKind::BceLogits:
        launch.template operator()<PointwiseKind::BceLogits>();
        break;
    }
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

bool nll_loss_forward_kernel(const Tensor& out, Reduction red, const Tensor& total_weight, const Tensor& x, const Tensor& target, const Tensor& w,
                             ClassShape cs, int64_t ignore) {
  const int64_t ns = cs.n * cs.s;
  check_count("nll_loss", ns);
  DeviceGuard guard(x.device().index);
  const bool reduced = red != Reduction::None;
  const Plan p = plan_for(x, ns, reduced);
  detail::HostFlag flag;
  int* bad = flag.device_ptr(p.stream);
  dispatch_loss(x.dtype(), "nll_loss", [&]<typename T>() {
    using A = acc_t<T>;
    dispatch_target(target.dtype(), [&]<typename I>() {
      if (ns > 0)
        nll_forward_kernel<T, I><<<p.blocks, kThreads, 0, p.stream>>>(static_cast<uint32_t>(ns), cs.c, cs.s, cptr<T>(x), cptr<I>(target), cptr<T>(w),
                                                                      ignore, reduced ? nullptr : mptr<T>(out), mptr<A>(p.partials), bad);
    });
    if (reduced) finish<T>(p, ns > 0, out, 1.0, red == Reduction::Mean, total_weight);
  });
  DP_CUDA_CHECK(cudaGetLastError());
  return flag.raised();
}

void nll_loss_backward_kernel(const Tensor& gi, const LossGrad& g, const Tensor& target, const Tensor& w, ClassShape cs, int64_t ignore) {
  const int64_t ns = cs.n * cs.s;
  check_count("nll_loss backward", ns);
  DeviceGuard guard(gi.device().index);
  const Plan p = plan_for(gi, ns, false);
  if (gi.numel() > 0) DP_CUDA_CHECK(cudaMemsetAsync(gi.data_ptr(), 0, gi.nbytes(), p.stream));
  if (ns == 0) return;
  dispatch_loss(gi.dtype(), "nll_loss backward", [&]<typename T>() {
    dispatch_target(target.dtype(), [&]<typename I>() {
      nll_backward_kernel<T, I><<<p.blocks, kThreads, 0, p.stream>>>(static_cast<uint32_t>(ns), cs.c, cs.s, cptr<I>(target), cptr<T>(w), ignore,
                                                                     grad_in<T>(g), mptr<T>(gi));
    });
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

bool cross_entropy_index_forward_kernel(const Tensor& out, Reduction red, const Tensor& total_weight, const Tensor& lse, const Tensor& x,
                                        const Tensor& target, const Tensor& w, ClassShape cs, int64_t ignore, double eps) {
  const int64_t ns = cs.n * cs.s;
  const Groups gr = groups_for(cs);
  check_count("cross_entropy", ns * gr.L);
  DeviceGuard guard(x.device().index);
  const bool reduced = red != Reduction::None;
  const Plan p = plan_for(x, ns * gr.L, reduced);
  detail::HostFlag flag;
  int* bad = flag.device_ptr(p.stream);
  dispatch_loss(x.dtype(), "cross_entropy", [&]<typename T>() {
    using A = acc_t<T>;
    const A keep = static_cast<A>(1.0 - eps), per_class = smoothing_per_class<A>(eps, cs.c);
    dispatch_target(target.dtype(), [&]<typename I>() {
      if (ns > 0)
        ce_index_forward_kernel<T, I><<<p.blocks, kThreads, 0, p.stream>>>(static_cast<uint32_t>(ns), cs.c, cs.s, gr, cptr<T>(x), cptr<I>(target),
                                                                           cptr<T>(w), ignore, keep, per_class, reduced ? nullptr : mptr<T>(out),
                                                                           mptr<A>(lse), mptr<A>(p.partials), bad);
    });
    if (reduced) finish<T>(p, ns > 0, out, 1.0, red == Reduction::Mean, total_weight);
  });
  DP_CUDA_CHECK(cudaGetLastError());
  return flag.raised();
}

void cross_entropy_index_backward_kernel(const Tensor& gi, const LossGrad& g, const Tensor& x, const Tensor& target, const Tensor& w,
                                         const Tensor& lse, ClassShape cs, int64_t ignore, double eps) {
  const int64_t ns = cs.n * cs.s;
  if (ns == 0 || gi.numel() == 0) return;
  const Groups gr = groups_for(cs);
  check_count("cross_entropy backward", ns * gr.L);
  DeviceGuard guard(x.device().index);
  const Plan p = plan_for(x, ns * gr.L, false);
  dispatch_loss(x.dtype(), "cross_entropy backward", [&]<typename T>() {
    using A = acc_t<T>;
    const A keep = static_cast<A>(1.0 - eps), per_class = smoothing_per_class<A>(eps, cs.c);
    dispatch_target(target.dtype(), [&]<typename I>() {
      ce_index_backward_kernel<T, I><<<p.blocks, kThreads, 0, p.stream>>>(static_cast<uint32_t>(ns), cs.c, cs.s, gr, cptr<T>(x), cptr<I>(target),
                                                                          cptr<T>(w), ignore, keep, per_class, cptr<A>(lse), grad_in<T>(g),
                                                                          mptr<T>(gi));
    });
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_prob_forward_kernel(const Tensor& out, bool reduced, double scale, const Tensor& lse, const Tensor& rs, const Tensor& x,
                                       const Tensor& tq, const Tensor& w, ClassShape cs, double eps) {
  const int64_t ns = cs.n * cs.s;
  const Groups gr = groups_for(cs);
  check_count("cross_entropy", ns * gr.L);
  DeviceGuard guard(x.device().index);
  const Plan p = plan_for(x, ns * gr.L, reduced);
  dispatch_loss(x.dtype(), "cross_entropy", [&]<typename T>() {
    using A = acc_t<T>;
    const A keep = static_cast<A>(1.0 - eps), per_class = smoothing_per_class<A>(eps, cs.c);
    if (ns > 0)
      ce_prob_forward_kernel<T><<<p.blocks, kThreads, 0, p.stream>>>(static_cast<uint32_t>(ns), cs.c, cs.s, gr, cptr<T>(x), cptr<T>(tq), cptr<T>(w),
                                                                     keep, per_class, reduced ? nullptr : mptr<T>(out), mptr<A>(lse), mptr<A>(rs),
                                                                     mptr<A>(p.partials));
    if (reduced) finish<T>(p, ns > 0, out, scale, false, Tensor());
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_prob_backward_kernel(const Tensor& gi, const Tensor& gt, const LossGrad& g, const Tensor& x, const Tensor& tq, const Tensor& w,
                                        const Tensor& lse, const Tensor& rs, ClassShape cs, double eps) {
  const int64_t ns = cs.n * cs.s;
  if (ns == 0 || x.numel() == 0) return;
  const Groups gr = groups_for(cs);
  check_count("cross_entropy backward", ns * gr.L);
  DeviceGuard guard(x.device().index);
  const Plan p = plan_for(x, ns * gr.L, false);
  dispatch_loss(x.dtype(), "cross_entropy backward", [&]<typename T>() {
    using A = acc_t<T>;
    const A keep = static_cast<A>(1.0 - eps), per_class = smoothing_per_class<A>(eps, cs.c);
    ce_prob_backward_kernel<T><<<p.blocks, kThreads, 0, p.stream>>>(static_cast<uint32_t>(ns), cs.c, cs.s, gr, cptr<T>(x), cptr<T>(tq), cptr<T>(w),
                                                                    keep, per_class, cptr<A>(lse), cptr<A>(rs), grad_in<T>(g), mptr<T>(gi),
                                                                    mptr<T>(gt));
  });
  DP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dp::backend::cuda
