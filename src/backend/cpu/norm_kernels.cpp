// Fused layer_norm / batch_norm / dropout kernels (see norm_kernels.h).
//
// Sums are taken in float64 with eight independent accumulators (instruction-level parallelism
// and SIMD without reassociating a single chain), variances in two passes (mean first, then the
// squared deviations), so float32 inputs with a large mean keep their precision. Element-wise
// passes are plain indexed loops over typed pointers that the compiler vectorises.
#include "backend/cpu/norm_kernels.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>
#include "backend/dispatch.h"
#include "core/philox.h"
#include "dp/core/generator.h"
#include "dp/core/worker.h"

namespace dp::backend::cpu {
namespace {

// ---------------------------------------------------------------- threads

// Below this many elements of work a call stays on the calling thread (a thread start costs
// tens of microseconds).
constexpr int64_t kParallelMinWork = int64_t{1} << 18;

// How many threads to split `items` items of `work_per_item` elements each over.
int64_t plan_threads(int64_t items, int64_t work_per_item) {
  if (items < 2 || Worker::current() != nullptr) return 1;
  const int64_t total = items * std::max<int64_t>(1, work_per_item);
  if (total < 2 * kParallelMinWork) return 1;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return std::min<int64_t>({hw, 8, total / kParallelMinWork, items});
}

// Calls f(begin, end, t) for `threads` contiguous ranges of [0, items), range t on thread t
// (range 0 on the caller). f must not throw.
template <typename F>
void run_ranges(int64_t items, int64_t threads, const F& f) {
  if (threads <= 1) {
    f(int64_t{0}, items, int64_t{0});
    return;
  }
  const int64_t chunk = (items + threads - 1) / threads;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t b0 = t * chunk, b1 = std::min(items, b0 + chunk);
    if (b0 < b1) pool.emplace_back([&f, b0, b1, t] { f(b0, b1, t); });
  }
  f(int64_t{0}, std::min(items, chunk), int64_t{0});
  for (std::thread& th : pool) th.join();
}

// ---------------------------------------------------------------- row sums

// sum_{i < n} f(i) in float64, eight independent accumulators.
template <typename F>
inline double sum8(int64_t n, F f) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 += f(i);
    a1 += f(i + 1);
    a2 += f(i + 2);
    a3 += f(i + 3);
    a4 += f(i + 4);
    a5 += f(i + 5);
    a6 += f(i + 6);
    a7 += f(i + 7);
  }
  double r = 0;
  for (; i < n; ++i) r += f(i);
  return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + r;
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
template <typename T>
T* mut_ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// The norm kernels are float32 / float64 only (the ops check first; this is a backstop).
template <typename F>
void dispatch_norm(DType t, const char* op, F&& f) {
  dispatch_types<float, double>(t, op, std::forward<F>(f));
}

// Batch norm's (input, parameter) type pairs: (T, T) for T float32 / float64 / bfloat16, and
// (bfloat16, float32). `param` is the dtype of the weight / bias (and their gradients); the ops
// check the combinations first, this is a backstop.
template <typename F>
void dispatch_batch_norm(DType input, DType param, const char* op, F&& f) {
  if (input == DType::BFloat16 && param == DType::Float32) {
    f.template operator()<BFloat16, float>();
    return;
  }
  DP_CHECK(param == input, DTypeError, op, ": unsupported weight/bias dtype ", dtype_name(param), " for a ", dtype_name(input),
           " input (supported: the input's dtype, or float32 for a bfloat16 input)");
  dispatch_types<float, double, BFloat16>(input, op, [&]<typename T>() { f.template operator()<T, T>(); });
}

// The dtype of the first defined tensor, else `fallback`.
DType first_dtype(std::initializer_list<const Tensor*> ts, DType fallback) {
  for (const Tensor* t : ts)
    if (t->defined()) return t->dtype();
  return fallback;
}

// ---------------------------------------------------------------- layer norm

template <typename T>
void layer_norm_impl(const T* x, const T* w, const T* b, int64_t M, int64_t N, double eps, T* y, double* mean, double* rstd) {
  const double inv_n = N > 0 ? 1.0 / static_cast<double>(N) : std::numeric_limits<double>::quiet_NaN();
  run_ranges(M, plan_threads(M, N), [&](int64_t r0, int64_t r1, int64_t) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * N;
      T* yr = y + r * N;
      const double mu = sum8(N, [xr](int64_t i) { return static_cast<double>(xr[i]); }) * inv_n;
      const double var = sum8(N,
                              [xr, mu](int64_t i) {
                                const double d = static_cast<double>(xr[i]) - mu;
                                return d * d;
                              }) *
                         inv_n;
      const double rs = 1.0 / std::sqrt(var + eps);
      mean[r] = mu;
      rstd[r] = rs;
      const T tm = static_cast<T>(mu), tr = static_cast<T>(rs);
      if (w && b) {
        for (int64_t i = 0; i < N; ++i) yr[i] = (xr[i] - tm) * tr * w[i] + b[i];
      } else if (w) {
        for (int64_t i = 0; i < N; ++i) yr[i] = (xr[i] - tm) * tr * w[i];
      } else if (b) {
        for (int64_t i = 0; i < N; ++i) yr[i] = (xr[i] - tm) * tr + b[i];
      } else {
        for (int64_t i = 0; i < N; ++i) yr[i] = (xr[i] - tm) * tr;
      }
    }
  });
}

template <typename T>
void layer_norm_backward_impl(const T* dy, const T* x, const double* mean, const double* rstd, const T* w, int64_t M, int64_t N, T* dx, T* dw,
                              T* db) {
  const bool want_wb = dw || db;
  const int64_t threads = plan_threads(M, N);
  // Per-thread partial sums of dw and db over its rows, combined at the end in thread order.
  std::vector<double> partial(want_wb ? static_cast<size_t>(threads * 2 * N) : 0, 0.0);
  const double inv_n = N > 0 ? 1.0 / static_cast<double>(N) : 0.0;
  run_ranges(M, threads, [&](int64_t r0, int64_t r1, int64_t t) {
    double* pw = want_wb ? partial.data() + t * 2 * N : nullptr;
    double* pb = want_wb ? pw + N : nullptr;
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * N;
      const T* gr = dy + r * N;
      const double mu = mean[r], rs = rstd[r];
      if (want_wb) {
        for (int64_t i = 0; i < N; ++i) {
          const double g = static_cast<double>(gr[i]);
          pw[i] += g * (static_cast<double>(xr[i]) - mu) * rs;
          pb[i] += g;
        }
      }
      if (dx) {
        T* dr = dx + r * N;
        // g = dy * w;  dx = rs * (g - mean(g) - xhat * mean(g * xhat)),  xhat = (x - mu) * rs.
        double sg, sgx;
        if (w) {
          sg = sum8(N, [gr, w](int64_t i) { return static_cast<double>(gr[i]) * static_cast<double>(w[i]); });
          sgx = sum8(
              N, [gr, w, xr, mu](int64_t i) { return static_cast<double>(gr[i]) * static_cast<double>(w[i]) * (static_cast<double>(xr[i]) - mu); });
        } else {
          sg = sum8(N, [gr](int64_t i) { return static_cast<double>(gr[i]); });
          sgx = sum8(N, [gr, xr, mu](int64_t i) { return static_cast<double>(gr[i]) * (static_cast<double>(xr[i]) - mu); });
        }
        const double c1 = sg * inv_n, c2 = sgx * rs * rs * inv_n;
        if (w) {
          for (int64_t i = 0; i < N; ++i)
            dr[i] = static_cast<T>(rs * (static_cast<double>(gr[i]) * static_cast<double>(w[i]) - c1 - (static_cast<double>(xr[i]) - mu) * c2));
        } else {
          for (int64_t i = 0; i < N; ++i) dr[i] = static_cast<T>(rs * (static_cast<double>(gr[i]) - c1 - (static_cast<double>(xr[i]) - mu) * c2));
        }
      }
    }
  });
  if (want_wb) {
    for (int64_t i = 0; i < N; ++i) {
      double sw = 0, sb = 0;
      for (int64_t t = 0; t < threads; ++t) {
        sw += partial[t * 2 * N + i];
        sb += partial[t * 2 * N + N + i];
      }
      if (dw) dw[i] = static_cast<T>(sw);
      if (db) db[i] = static_cast<T>(sb);
    }
  }
}

// ---------------------------------------------------------------- batch norm
//
// T is the input's type (float32, float64, bfloat16), P the weight/bias type: T itself, or float32
// for a bfloat16 input (PyTorch's CPU mixed precision). Statistics and gradients are summed in
// float64 whatever T; a bfloat16 element is widened on load and each result rounded once on store.
// x is [B, C, L]. With L > 1 each (b, c) row of L values is contiguous and reduced with sum8; with
// L == 1 ([B, C] input) a channel's values are C apart, so the loops run over b outside and over
// the channels inside, accumulating into per-channel arrays (vectorised across channels).
// Threads take disjoint channel ranges.

template <typename T>
void bn_stats_impl(const T* x, int64_t B, int64_t C, int64_t L, double* mean, double* var) {
  const double inv_m = B * L > 0 ? 1.0 / static_cast<double>(B * L) : std::numeric_limits<double>::quiet_NaN();
  run_ranges(C, plan_threads(C, B * L), [&](int64_t c0, int64_t c1, int64_t) {
    if (L == 1) {
      const int64_t n = c1 - c0;
      std::vector<double> s(static_cast<size_t>(n), 0.0);
      for (int64_t b = 0; b < B; ++b) {
        const T* xb = x + b * C + c0;
        for (int64_t k = 0; k < n; ++k) s[k] += static_cast<double>(xb[k]);
      }
      for (int64_t k = 0; k < n; ++k) {
        mean[c0 + k] = s[k] * inv_m;
        s[k] = 0;
      }
      const double* mu = mean + c0;
      for (int64_t b = 0; b < B; ++b) {
        const T* xb = x + b * C + c0;
        for (int64_t k = 0; k < n; ++k) {
          const double d = static_cast<double>(xb[k]) - mu[k];
          s[k] += d * d;
        }
      }
      for (int64_t k = 0; k < n; ++k) var[c0 + k] = s[k] * inv_m;
      return;
    }
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t b = 0; b < B; ++b) {
        const T* row = x + (b * C + c) * L;
        s += sum8(L, [row](int64_t i) { return static_cast<double>(row[i]); });
      }
      const double mu = s * inv_m;
      double q = 0;
      for (int64_t b = 0; b < B; ++b) {
        const T* row = x + (b * C + c) * L;
        q += sum8(L, [row, mu](int64_t i) {
          const double d = static_cast<double>(row[i]) - mu;
          return d * d;
        });
      }
      mean[c] = mu;
      var[c] = q * inv_m;
    }
  });
}

template <typename T, typename P>
void bn_apply_impl(const T* x, const double* mean, const double* invstd, const P* w, const P* b, int64_t B, int64_t C, int64_t L, T* y) {
  // y = (x - mean) * scale + shift with scale = invstd * w, shift = b, in A (T, or float32 for
  // bfloat16: one rounding per output).
  using A = std::conditional_t<is_reduced_float_v<T>, float, T>;
  std::vector<A> m(static_cast<size_t>(C)), sc(static_cast<size_t>(C)), sh(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    m[c] = static_cast<A>(mean[c]);
    sc[c] = static_cast<A>(invstd[c] * (w ? convert<double>(w[c]) : 1.0));
    sh[c] = b ? convert<A>(b[c]) : A(0);
  }
  run_ranges(C, plan_threads(C, B * L), [&](int64_t c0, int64_t c1, int64_t) {
    if (L == 1) {
      const A* pm = m.data() + c0;
      const A* ps = sc.data() + c0;
      const A* ph = sh.data() + c0;
      const int64_t n = c1 - c0;
      for (int64_t bi = 0; bi < B; ++bi) {
        const T* xb = x + bi * C + c0;
        T* yb = y + bi * C + c0;
        for (int64_t k = 0; k < n; ++k) yb[k] = convert<T>((convert<A>(xb[k]) - pm[k]) * ps[k] + ph[k]);
      }
      return;
    }
    for (int64_t bi = 0; bi < B; ++bi) {
      for (int64_t c = c0; c < c1; ++c) {
        const T* row = x + (bi * C + c) * L;
        T* out = y + (bi * C + c) * L;
        const A tm = m[c], ts = sc[c], th = sh[c];
        for (int64_t i = 0; i < L; ++i) out[i] = convert<T>((convert<A>(row[i]) - tm) * ts + th);
      }
    }
  });
}

template <typename T, typename P>
void bn_backward_impl(const T* dy, const T* x, const double* mean, const double* invstd, const P* w, bool training, int64_t B, int64_t C, int64_t L,
                      T* dx, P* dw, P* db) {
  const bool need_sums = dw || db || (dx && training);
  const double inv_m = B * L > 0 ? 1.0 / static_cast<double>(B * L) : 0.0;
  run_ranges(C, plan_threads(C, B * L), [&](int64_t c0, int64_t c1, int64_t) {
    const int64_t n = c1 - c0;
    // Per channel of the range: sum(dy) and sum(dy * (x - mean)).
    std::vector<double> sdy(static_cast<size_t>(n), 0.0), sdx(static_cast<size_t>(n), 0.0);
    if (need_sums) {
      if (L == 1) {
        const double* mu = mean + c0;
        for (int64_t bi = 0; bi < B; ++bi) {
          const T* gb = dy + bi * C + c0;
          const T* xb = x + bi * C + c0;
          for (int64_t k = 0; k < n; ++k) {
            const double g = static_cast<double>(gb[k]);
            sdy[k] += g;
            sdx[k] += g * (static_cast<double>(xb[k]) - mu[k]);
          }
        }
      } else {
        for (int64_t c = c0; c < c1; ++c) {
          const double mu = mean[c];
          double s1 = 0, s2 = 0;
          for (int64_t bi = 0; bi < B; ++bi) {
            const T* gr = dy + (bi * C + c) * L;
            const T* xr = x + (bi * C + c) * L;
            s1 += sum8(L, [gr](int64_t i) { return static_cast<double>(gr[i]); });
            s2 += sum8(L, [gr, xr, mu](int64_t i) { return static_cast<double>(gr[i]) * (static_cast<double>(xr[i]) - mu); });
          }
          sdy[c - c0] = s1;
          sdx[c - c0] = s2;
        }
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      if (dw) dw[c0 + k] = convert<P>(sdx[k] * invstd[c0 + k]);
      if (db) db[c0 + k] = convert<P>(sdy[k]);
    }
    if (!dx) return;
    // dx = (dy - a - (x - mean) * p) * k with k = invstd * w and, in training, a = mean(dy),
    // p = sum(dy * (x - mean)) * invstd^2 / M (the derivative through the batch statistics).
    std::vector<double> a(static_cast<size_t>(n)), p(static_cast<size_t>(n)), kk(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t c = c0 + k;
      const double is = invstd[c];
      kk[k] = is * (w ? convert<double>(w[c]) : 1.0);
      a[k] = training ? sdy[k] * inv_m : 0.0;
      p[k] = training ? sdx[k] * is * is * inv_m : 0.0;
    }
    if (L == 1) {
      const double* mu = mean + c0;
      for (int64_t bi = 0; bi < B; ++bi) {
        const T* gb = dy + bi * C + c0;
        const T* xb = x + bi * C + c0;
        T* ob = dx + bi * C + c0;
        for (int64_t k = 0; k < n; ++k) ob[k] = convert<T>((convert<double>(gb[k]) - a[k] - (convert<double>(xb[k]) - mu[k]) * p[k]) * kk[k]);
      }
      return;
    }
    for (int64_t bi = 0; bi < B; ++bi) {
      for (int64_t c = c0; c < c1; ++c) {
        const T* gr = dy + (bi * C + c) * L;
        const T* xr = x + (bi * C + c) * L;
        T* orow = dx + (bi * C + c) * L;
        const double mu = mean[c], ak = a[c - c0], pk = p[c - c0], k2 = kk[c - c0];
        if (training) {
          for (int64_t i = 0; i < L; ++i) orow[i] = convert<T>((convert<double>(gr[i]) - ak - (convert<double>(xr[i]) - mu) * pk) * k2);
        } else {
          for (int64_t i = 0; i < L; ++i) orow[i] = convert<T>(convert<double>(gr[i]) * k2);
        }
      }
    }
  });
}

}  // namespace

void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, int64_t M, int64_t N, double eps, const Tensor& out, const Tensor& mean,
                       const Tensor& rstd) {
  dispatch_norm(x.dtype(), "layer_norm", [&]<typename T>() {
    layer_norm_impl<T>(x.data_ptr<T>(), ptr_or_null<T>(w), ptr_or_null<T>(b), M, N, eps, out.data_ptr<T>(), mean.data_ptr<double>(),
                       rstd.data_ptr<double>());
  });
}

void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w, int64_t M, int64_t N,
                                const Tensor& dx, const Tensor& dw, const Tensor& db) {
  dispatch_norm(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    layer_norm_backward_impl<T>(dy.data_ptr<T>(), x.data_ptr<T>(), mean.data_ptr<double>(), rstd.data_ptr<double>(), ptr_or_null<T>(w), M, N,
                                mut_ptr_or_null<T>(dx), mut_ptr_or_null<T>(dw), mut_ptr_or_null<T>(db));
  });
}

void batch_norm_stats_kernel(const Tensor& x, int64_t B, int64_t C, int64_t L, const Tensor& mean, const Tensor& var) {
  dispatch_batch_norm(x.dtype(), x.dtype(), "batch_norm",
                      [&]<typename T, typename>() { bn_stats_impl<T>(x.data_ptr<T>(), B, C, L, mean.data_ptr<double>(), var.data_ptr<double>()); });
}

void batch_norm_apply_kernel(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& b, int64_t B, int64_t C,
                             int64_t L, const Tensor& out) {
  DP_CHECK(!w.defined() || !b.defined() || w.dtype() == b.dtype(), DTypeError, "batch_norm: weight (", w.describe(), ") and bias (", b.describe(),
           ") must have one dtype");
  dispatch_batch_norm(x.dtype(), first_dtype({&w, &b}, x.dtype()), "batch_norm", [&]<typename T, typename P>() {
    bn_apply_impl<T, P>(x.data_ptr<T>(), mean.data_ptr<double>(), invstd.data_ptr<double>(), ptr_or_null<P>(w), ptr_or_null<P>(b), B, C, L,
                        out.data_ptr<T>());
  });
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& w, bool training,
                                int64_t B, int64_t C, int64_t L, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const DType param = first_dtype({&w, &dw, &db}, x.dtype());
  for (const Tensor* t : {&w, &dw, &db})
    DP_CHECK(!t->defined() || t->dtype() == param, DTypeError, "batch_norm_backward: weight, grad_weight and grad_bias must have one dtype, got ",
             t->describe(), " besides ", dtype_name(param));
  dispatch_batch_norm(x.dtype(), param, "batch_norm_backward", [&]<typename T, typename P>() {
    bn_backward_impl<T, P>(dy.data_ptr<T>(), x.data_ptr<T>(), mean.data_ptr<double>(), invstd.data_ptr<double>(), ptr_or_null<P>(w), training, B, C,
                           L, mut_ptr_or_null<T>(dx), mut_ptr_or_null<P>(dw), mut_ptr_or_null<P>(db));
  });
}

void dropout_apply_kernel(const Tensor& x, const Tensor& mask, double scale, const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  // The mask read as bytes 0 / 1 and multiplied in (x * (m * scale)): a select on bool would not
  // vectorise, and the product keeps PyTorch's x * 0 (NaN stays NaN).
  const uint8_t* m = reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>());
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    T* op = out.data_ptr<T>();
    run_ranges(n, plan_threads(n, 1), [&](int64_t i0, int64_t i1, int64_t) {
      if constexpr (is_reduced_float_v<T>) {
        const float s = static_cast<float>(scale);
        for (int64_t i = i0; i < i1; ++i) op[i] = T(static_cast<float>(xp[i]) * (static_cast<float>(m[i]) * s));
      } else {
        const T s = static_cast<T>(scale);
        for (int64_t i = i0; i < i1; ++i) op[i] = xp[i] * (static_cast<T>(m[i]) * s);
      }
    });
  });
}

void dropout_forward_kernel(const Tensor& x, double keep, double scale, uint64_t seed, uint64_t first_block, const Tensor& mask, const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const uint64_t threshold = philox::dropout_threshold(keep);  // the keep decision: core/philox.h
  bool* m = mask.data_ptr<bool>();
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    T* op = out.data_ptr<T>();
    constexpr int per_block = philox::kDropoutPerBlock;
    const int64_t nblocks = (n + per_block - 1) / per_block;
    // Threads take disjoint block ranges; each element's word is fixed, so the split is invisible.
    run_ranges(nblocks, plan_threads(nblocks, 16), [&](int64_t b0, int64_t b1, int64_t) {
      uint32_t w[4];
      for (int64_t blk = b0; blk < b1; ++blk) {
        philox4x32(seed, first_block + static_cast<uint64_t>(blk), w);
        const int64_t i0 = blk * per_block, lim = std::min<int64_t>(per_block, n - i0);
        // Branch-free: the keep decision is random, a branch on it would mispredict half the time.
        for (int64_t k = 0; k < lim; ++k) {
          const uint32_t kept = static_cast<uint32_t>(philox::dropout_keep(w, static_cast<int>(k), threshold));
          m[i0 + k] = kept != 0;
          if constexpr (is_reduced_float_v<T>) {
            op[i0 + k] = T(static_cast<float>(xp[i0 + k]) * (static_cast<float>(kept) * static_cast<float>(scale)));
          } else {
            op[i0 + k] = xp[i0 + k] * (static_cast<T>(kept) * static_cast<T>(scale));
          }
        }
      }
    });
  });
}

}  // namespace dp::backend::cpu
