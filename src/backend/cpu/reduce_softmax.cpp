// Fused softmax / log_softmax and their backward passes, with no temporaries:
//  - dim is the innermost (inner == 1): per row, a max pass, an exp(+store) pass with a sum, and a
//    scale pass, all on one row that stays in L1;
//  - otherwise: per block of up to kBlock columns of the inner dims, the same three passes run down
//    `dim`, vectorised across the contiguous columns (no transpose copy).
// float32 uses a vectorised polynomial exp (reduce_vec.h); float64 uses std::exp;
// float16/bfloat16 compute in float32. In a portable build the four loops below are also compiled for
// AVX2 and AVX-512 and chosen at run time (DP_TARGET_CLONES, backend/cpu/cpu_dispatch.h).
#include "backend/cpu/reduce.h"
#include "backend/cpu/reduce_vec.h"
#include "backend/reduce_kernels.h"

namespace dp::backend::cpu {
namespace {

// Columns per block in the strided case: wide, so each pass down `dim` reads long contiguous runs
// (short runs, one per row, thrash the TLB when rows are pages apart).
constexpr int64_t kBlock = 1024;

// ---- forward ----

template <typename T, bool Log>
DP_TARGET_CLONES void softmax_rows(const T* x, T* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
    // A NaN anywhere gives a NaN row through the arithmetic; +inf gives nan (inf - inf) as in PyTorch.
    const T m = row_max(x, n);
    const T s = exp_diff<T, true>(x, nullptr, m, y, n);
    if constexpr (Log) {
      // (x - max) - log(sum): x - (max + log(sum)) would round max + log(sum) at max's magnitude.
      const T ls = std::log(s);
      for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) - ls;
    } else {
      const T inv = T(1) / s;
      for (int64_t j = 0; j < n; ++j) y[j] *= inv;
    }
  }
}

template <typename T, bool Log>
DP_TARGET_CLONES void softmax_cols(const T* x, T* y, int64_t outer, int64_t dsize, int64_t inner) {
  // Column sums run down all of `dim` one term at a time: accumulate them in double.
  T mx[kBlock];
  double acc[kBlock];
  for (int64_t o = 0; o < outer; ++o) {
    const T* xo = x + o * dsize * inner;
    T* yo = y + o * dsize * inner;
    for (int64_t j0 = 0; j0 < inner; j0 += kBlock) {
      const int64_t bn = std::min(kBlock, inner - j0);
      const T* xb = xo + j0;
      T* yb = yo + j0;
      for (int64_t j = 0; j < bn; ++j) mx[j] = xb[j];
      for (int64_t d = 1; d < dsize; ++d) {
        const T* xr = xb + d * inner;
        for (int64_t j = 0; j < bn; ++j) mx[j] = std::max(mx[j], xr[j]);
      }
      for (int64_t j = 0; j < bn; ++j) acc[j] = 0;
      for (int64_t d = 0; d < dsize; ++d) {
        T* yr = yb + d * inner;
        exp_diff<T, false>(xb + d * inner, mx, T(0), yr, bn);
        for (int64_t j = 0; j < bn; ++j) acc[j] += static_cast<double>(yr[j]);
      }
      if constexpr (Log) {
        T ls[kBlock];
        for (int64_t j = 0; j < bn; ++j) ls[j] = static_cast<T>(std::log(acc[j]));
        for (int64_t d = 0; d < dsize; ++d) {
          const T* xr = xb + d * inner;
          T* yr = yb + d * inner;
          for (int64_t j = 0; j < bn; ++j) yr[j] = (xr[j] - mx[j]) - ls[j];
        }
      } else {
        T inv[kBlock];
        for (int64_t j = 0; j < bn; ++j) inv[j] = static_cast<T>(1.0 / acc[j]);
        for (int64_t d = 0; d < dsize; ++d) {
          T* yr = yb + d * inner;
          for (int64_t j = 0; j < bn; ++j) yr[j] *= inv[j];
        }
      }
    }
  }
}

// ---- backward ----

template <typename T, bool Log>
DP_TARGET_CLONES void softmax_backward_rows(const T* g, const T* y, T* gi, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r, g += n, y += n, gi += n) {
    if constexpr (Log) {
      const T s = row_sum(g, n);
      exp_diff<T, false>(y, nullptr, T(0), gi, n);
      for (int64_t j = 0; j < n; ++j) gi[j] = g[j] - gi[j] * s;
    } else {
      const T dot = row_dot(g, y, n);
      for (int64_t j = 0; j < n; ++j) gi[j] = y[j] * (g[j] - dot);
    }
  }
}

template <typename T, bool Log>
DP_TARGET_CLONES void softmax_backward_cols(const T* g, const T* y, T* gi, int64_t outer, int64_t dsize, int64_t inner) {
  double acc[kBlock];
  T accT[kBlock];
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t base = o * dsize * inner;
    for (int64_t j0 = 0; j0 < inner; j0 += kBlock) {
      const int64_t bn = std::min(kBlock, inner - j0);
      const T* gb = g + base + j0;
      const T* yb = y + base + j0;
      T* ob = gi + base + j0;
      for (int64_t j = 0; j < bn; ++j) acc[j] = 0;
      for (int64_t d = 0; d < dsize; ++d) {
        const T* gr = gb + d * inner;
        const T* yr = yb + d * inner;
        if constexpr (Log) {
          for (int64_t j = 0; j < bn; ++j) acc[j] += static_cast<double>(gr[j]);
        } else {
          for (int64_t j = 0; j < bn; ++j) acc[j] += static_cast<double>(gr[j] * yr[j]);
        }
      }
      for (int64_t j = 0; j < bn; ++j) accT[j] = static_cast<T>(acc[j]);
      for (int64_t d = 0; d < dsize; ++d) {
        const T* gr = gb + d * inner;
        const T* yr = yb + d * inner;
        T* orow = ob + d * inner;
        if constexpr (Log) {
          exp_diff<T, false>(yr, nullptr, T(0), orow, bn);
          for (int64_t j = 0; j < bn; ++j) orow[j] = gr[j] - orow[j] * accT[j];
        } else {
          for (int64_t j = 0; j < bn; ++j) orow[j] = yr[j] * (gr[j] - accT[j]);
        }
      }
    }
  }
}

template <typename T>
void softmax_typed(const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  const backend::SoftmaxGeometry geo = backend::softmax_geometry(in, dim);
  const T* x = static_cast<const T*>(in.data_ptr());
  T* y = static_cast<T*>(out.data_ptr());
  if (geo.inner == 1) {
    if (log)
      softmax_rows<T, true>(x, y, geo.outer, geo.dsize);
    else
      softmax_rows<T, false>(x, y, geo.outer, geo.dsize);
  } else {
    if (log)
      softmax_cols<T, true>(x, y, geo.outer, geo.dsize, geo.inner);
    else
      softmax_cols<T, false>(x, y, geo.outer, geo.dsize, geo.inner);
  }
}

template <typename T>
void softmax_backward_typed(const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim, bool log) {
  const backend::SoftmaxGeometry geo = backend::softmax_geometry(y, dim);
  const T* gp = static_cast<const T*>(g.data_ptr());
  const T* yp = static_cast<const T*>(y.data_ptr());
  T* op = static_cast<T*>(gin.data_ptr());
  if (geo.inner == 1) {
    if (log)
      softmax_backward_rows<T, true>(gp, yp, op, geo.outer, geo.dsize);
    else
      softmax_backward_rows<T, false>(gp, yp, op, geo.outer, geo.dsize);
  } else {
    if (log)
      softmax_backward_cols<T, true>(gp, yp, op, geo.outer, geo.dsize, geo.inner);
    else
      softmax_backward_cols<T, false>(gp, yp, op, geo.outer, geo.dsize, geo.inner);
  }
}

}  // namespace

void softmax_kernel(const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  if (!check_softmax_args(out, in, log)) return;
  const char* name = log ? "log_softmax" : "softmax";
  dispatch_floating(in.dtype(), name, [&]<typename T>() {
    if constexpr (is_reduced_float_v<T>) {
      Tensor x32 = convert_nograd(in, kFloat32);
      Tensor y32 = make_empty(in.sizes(), kFloat32, in.device());
      softmax_typed<float>(y32, x32, dim, log);
      backend::copy_kernel(backend::copy_device_type(out, y32), out, y32);
    } else {
      softmax_typed<T>(out, in, dim, log);
    }
  });
}

void softmax_backward_kernel(const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim, bool log) {
  if (!check_softmax_backward_args(gin, g, y, log)) return;
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  dispatch_floating(y.dtype(), name, [&]<typename T>() {
    if constexpr (is_reduced_float_v<T>) {
      Tensor g32 = convert_nograd(g, kFloat32), y32 = convert_nograd(y, kFloat32);
      Tensor o32 = make_empty(y.sizes(), kFloat32, y.device());
      softmax_backward_typed<float>(o32, g32, y32, dim, log);
      backend::copy_kernel(backend::copy_device_type(gin, o32), gin, o32);
    } else {
      softmax_backward_typed<T>(gin, g, y, dim, log);
    }
  });
}

}  // namespace dp::backend::cpu
