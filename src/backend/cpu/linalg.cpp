// The CPU backend's matrix products (linalg_kernels.h).
//  - float32/float64: OpenBLAS. A matrix whose last two strides are (ld, 1) or (1, ld) is passed as
//    it is (x.t() and w.t() need no copy: the trans flag and leading dimension say how to read it);
//    anything else is copied to a contiguous buffer first. When B has no batch dims and A's batch
//    and row dims fold into one row dim ([B, n, k] @ [k, m], and linear on any rank), it is one GEMM.
//  - bfloat16: oneDNN's matmul (onednn.h: AMX / AVX512-BF16, float32 accumulation, one rounding),
//    with the same layouts, folding and batching as OpenBLAS's, when the build has oneDNN and it has
//    a kernel for this CPU; otherwise as float16.
//  - float16 (and bfloat16 without oneDNN): converted to float32, computed there, rounded back once.
//  - uint8/int32/int64: a reference loop (wrapping arithmetic, as PyTorch's CPU integer GEMM).
#include <algorithm>
#include <optional>
#include <vector>
#include "backend/blas_layout.h"
#include "backend/linalg_kernels.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/onednn.h"
#include "backend/dispatch.h"
#include "backend/cpu/loops.h"

namespace dp::backend::cpu {
namespace {

bool is_zero(const Scalar& s) { return s.to_double() == 0.0 && (s.is_floating_point() || s.to_int() == 0); }
bool is_one(const Scalar& s) { return s.is_floating_point() ? s.to_double() == 1.0 : s.to_int() == 1; }

Tensor raw_copy(const Tensor& t, DType dt) {
  Tensor c = make_empty(t.sizes(), dt, t.device());
  backend::copy_kernel(backend::copy_device_type(c, t), c, t);
  return c;
}

// Element offsets of X's matrices for every index of `batch` (row-major), X's batch dims
// broadcast to it (stride 0 where X has size 1 or lacks the dim).
std::vector<int64_t> batch_offsets(const Tensor& X, IntArrayRef batch) {
  const int nb = static_cast<int>(batch.size());
  const int xb = static_cast<int>(X.dim()) - 2;
  std::vector<int64_t> st(nb, 0);
  for (int j = 0; j < nb; ++j) {
    int d = j - (nb - xb);
    if (d >= 0 && X.sizes()[d] != 1) st[j] = X.strides()[d];
  }
  const int64_t count = numel_of(batch);
  std::vector<int64_t> offs(count);
  std::vector<int64_t> idx(nb, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < count; ++i) {
    offs[i] = off;
    for (int d = nb - 1; d >= 0; --d) {
      if (++idx[d] < batch[d]) {
        off += st[d];
        break;
      }
      off -= st[d] * (batch[d] - 1);
      idx[d] = 0;
    }
  }
  return offs;
}

// One GEMM, or `count` of one shape, on the library for T: OpenBLAS for float and double, oneDNN
// for bfloat16. false: that library cannot take the call (oneDNN absent or switched off), nothing
// was written.
bool lib_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
              float* c, int64_t ldc) {
  backend::cpu::blas::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return true;
}
bool lib_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
              double beta, double* c, int64_t ldc) {
  backend::cpu::blas::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return true;
}
bool lib_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
              float beta, BFloat16* c, int64_t ldc) {
  return backend::cpu::onednn::gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
template <typename T, typename S>
bool lib_gemm_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, S alpha, const T* const* a, int64_t lda, const T* const* b, int64_t ldb,
                      S beta, T* const* c, int64_t ldc, int64_t count) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return backend::cpu::onednn::gemm_bf16_batched(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, count);
  } else {
    backend::cpu::blas::gemm_batched(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, count);
    return true;
  }
}

// C = alpha * A @ B + beta * C on lib_gemm (S: the scalars' type). false: lib_gemm could not, C untouched.
template <typename T, typename S>
bool gemm_blas(const Tensor& C, Tensor A, Tensor B, S alpha, S beta) {
  const int64_t m = C.size(-2), n = C.size(-1), k = A.size(-1);
  const Shape batch(C.sizes().begin(), C.sizes().end() - 2);
  auto la = blas_layout(m, k, A.stride(-2), A.stride(-1));
  if (!la) {
    A = raw_copy(A, A.dtype());
    la = blas_layout(m, k, A.stride(-2), A.stride(-1));
  }
  auto lb = blas_layout(k, n, B.stride(-2), B.stride(-1));
  if (!lb) {
    B = raw_copy(B, B.dtype());
    lb = blas_layout(k, n, B.stride(-2), B.stride(-1));
  }
  const T* a = static_cast<const T*>(A.data_ptr());
  const T* b = static_cast<const T*>(B.data_ptr());
  T* c = static_cast<T*>(C.data_ptr());
  if (batch.empty()) return lib_gemm(la->trans, lb->trans, m, n, k, alpha, a, la->ld, b, lb->ld, beta, c, n);
  const int64_t count = numel_of(batch);
  if (B.dim() == 2 && !la->trans) {
    if (auto lda = fold_rows(A, k))  // [*, m, k] @ [k, n]: one GEMM with count*m rows
      return lib_gemm(false, lb->trans, count * m, n, k, alpha, a, *lda, b, lb->ld, beta, c, n);
  }
  std::vector<int64_t> oa = batch_offsets(A, batch), ob = batch_offsets(B, batch);
  std::vector<const T*> pa(count), pb(count);
  std::vector<T*> pc(count);
  for (int64_t i = 0; i < count; ++i) {
    pa[i] = a + oa[i];
    pb[i] = b + ob[i];
    pc[i] = c + i * m * n;
  }
  return lib_gemm_batched<T, S>(la->trans, lb->trans, m, n, k, alpha, pa.data(), la->ld, pb.data(), lb->ld, beta, pc.data(), n, count);
}

// Integer GEMM: accumulates in 64 bits with wrap-around, as PyTorch's CPU kernel does in T.
template <typename T>
void gemm_reference(const Tensor& C, const Tensor& A, const Tensor& B, int64_t alpha, int64_t beta) {
  const int64_t m = C.size(-2), n = C.size(-1), k = A.size(-1);
  const Shape batch(C.sizes().begin(), C.sizes().end() - 2);
  const int64_t count = numel_of(batch);
  std::vector<int64_t> oa = batch_offsets(A, batch), ob = batch_offsets(B, batch);
  const int64_t as0 = A.stride(-2), as1 = A.stride(-1), bs0 = B.stride(-2), bs1 = B.stride(-1);
  const T* a = static_cast<const T*>(A.data_ptr());
  const T* b = static_cast<const T*>(B.data_ptr());
  T* c = static_cast<T*>(C.data_ptr());
  std::vector<uint64_t> acc(n);
  const uint64_t ua = static_cast<uint64_t>(alpha), ub = static_cast<uint64_t>(beta);
  for (int64_t bi = 0; bi < count; ++bi) {
    const T* ab = a + oa[bi];
    const T* bb = b + ob[bi];
    T* cb = c + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t p = 0; p < k; ++p) {
        const uint64_t av = static_cast<uint64_t>(static_cast<int64_t>(ab[i * as0 + p * as1]));
        const T* brow = bb + p * bs0;
        for (int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<uint64_t>(static_cast<int64_t>(brow[j * bs1]));
      }
      T* crow = cb + i * n;
      for (int64_t j = 0; j < n; ++j) {
        uint64_t r = ua * acc[j];
        if (beta != 0) r += ub * static_cast<uint64_t>(static_cast<int64_t>(crow[j]));
        crow[j] = static_cast<T>(r);
      }
    }
  }
}

void scale_inplace(const Tensor& C, const Scalar& s) {
  backend::cpu::ElementwiseIter it({&C, &C}, C.sizes());
  backend::dispatch_numeric(C.dtype(), "scale", [&]<typename T>() {
    if constexpr (backend::is_float_v<T>) {
      const double v = s.to_double();
      backend::cpu::cpu_kernel<T, T>(it, [v](T x) { return backend::convert<T>(static_cast<double>(backend::convert<double>(x)) * v); });
    } else {
      const uint64_t v = static_cast<uint64_t>(s.to_int());
      backend::cpu::cpu_kernel<T, T>(it, [v](T x) { return static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(x)) * v); });
    }
  });
}

void matmul_kernel(const Tensor& C, const Tensor& A, const Tensor& B, const Scalar& alpha, const Scalar& beta, const char* op, bool /*tf32_ok*/) {
  if (C.numel() == 0) return;
  if (A.size(-1) == 0) {  // empty sum: beta * C
    if (is_zero(beta))
      backend::fill_kernel(C.device().type, C, 0);
    else if (!is_one(beta))
      scale_inplace(C, beta);
    return;
  }
  switch (C.dtype()) {
    case kFloat32:
      gemm_blas<float>(C, A, B, static_cast<float>(alpha.to_double()), static_cast<float>(beta.to_double()));
      return;
    case kFloat64:
      gemm_blas<double>(C, A, B, alpha.to_double(), beta.to_double());
      return;
    case kBFloat16:
      if (backend::cpu::onednn::active() && gemm_blas<BFloat16>(C, A, B, static_cast<float>(alpha.to_double()), static_cast<float>(beta.to_double())))
        return;
      [[fallthrough]];
    case kFloat16: {
      Tensor Cf = make_empty(C.sizes(), kFloat32, C.device());
      if (!is_zero(beta)) backend::copy_kernel(backend::copy_device_type(Cf, C), Cf, C);
      gemm_blas<float>(Cf, raw_copy(A, kFloat32), raw_copy(B, kFloat32), static_cast<float>(alpha.to_double()), static_cast<float>(beta.to_double()));
      backend::copy_kernel(backend::copy_device_type(C, Cf), C, Cf);
      return;
    }
    case kUInt8:
      gemm_reference<uint8_t>(C, A, B, alpha.to_int(), beta.to_int());
      return;
    case kInt32:
      gemm_reference<int32_t>(C, A, B, alpha.to_int(), beta.to_int());
      return;
    case kInt64:
      gemm_reference<int64_t>(C, A, B, alpha.to_int(), beta.to_int());
      return;
    default:
      backend::unsupported_dtype(op, C.dtype(), "uint8, int32, int64, float16, bfloat16, float32, float64");
  }
}

// The bias rows first; the GEMM accumulates onto them (beta = 1).
void matmul_bias_kernel(const Tensor& C, const Tensor& A, const Tensor& B, const Tensor& bias, const char* op) {
  backend::copy_kernel(backend::copy_device_type(C, bias), C, bias);
  matmul_kernel(C, A, B, 1, 1, op, true);
}

void dot_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0);
  backend::dispatch_numeric(a.dtype(), "dot", [&]<typename T>() {
    T* o = static_cast<T*>(out.data_ptr());
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      Tensor ac = (n <= 1 || a.stride(0) >= 1) ? a : raw_copy(a, a.dtype());
      Tensor bc = (n <= 1 || b.stride(0) >= 1) ? b : raw_copy(b, b.dtype());
      const int64_t ia = n <= 1 ? 1 : ac.stride(0), ib = n <= 1 ? 1 : bc.stride(0);
      *o = backend::cpu::blas::dot(n, static_cast<const T*>(ac.data_ptr()), ia, static_cast<const T*>(bc.data_ptr()), ib);
    } else {
      const T* pa = static_cast<const T*>(a.data_ptr());
      const T* pb = static_cast<const T*>(b.data_ptr());
      const int64_t sa = a.stride(0), sb = b.stride(0);
      if constexpr (backend::is_reduced_float_v<T>) {
        float acc = 0.0f;
        for (int64_t i = 0; i < n; ++i) acc += static_cast<float>(pa[i * sa]) * static_cast<float>(pb[i * sb]);
        *o = T(acc);
      } else {
        uint64_t acc = 0;
        for (int64_t i = 0; i < n; ++i)
          acc += static_cast<uint64_t>(static_cast<int64_t>(pa[i * sa])) * static_cast<uint64_t>(static_cast<int64_t>(pb[i * sb]));
        *o = static_cast<T>(acc);
      }
    }
  });
}

void outer_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  const DType rt = out.dtype();
  const int64_t n = a.size(0), m = b.size(0);
  backend::dispatch_all(rt, "outer", [&]<typename R>() {
    backend::dispatch_all(a.dtype(), "outer", [&]<typename TA>() {
      backend::dispatch_all(b.dtype(), "outer", [&]<typename TB>() {
        const TA* pa = static_cast<const TA*>(a.data_ptr());
        const TB* pb = static_cast<const TB*>(b.data_ptr());
        const int64_t sa = n > 1 ? a.stride(0) : 0, sb = m > 1 ? b.stride(0) : 0;
        R* o = static_cast<R*>(out.data_ptr());
        std::vector<R> brow(m);
        for (int64_t j = 0; j < m; ++j) brow[j] = backend::convert<R>(pb[j * sb]);
        for (int64_t i = 0; i < n; ++i) {
          const R x = backend::convert<R>(pa[i * sa]);
          R* orow = o + i * m;
          if constexpr (std::is_same_v<R, bool>) {
            for (int64_t j = 0; j < m; ++j) orow[j] = x && brow[j];
          } else if constexpr (backend::is_reduced_float_v<R>) {
            const float xf = static_cast<float>(x);
            for (int64_t j = 0; j < m; ++j) orow[j] = R(xf * static_cast<float>(brow[j]));
          } else if constexpr (std::is_floating_point_v<R>) {
            for (int64_t j = 0; j < m; ++j) orow[j] = x * brow[j];
          } else {  // integers wrap, as in PyTorch
            const uint64_t xu = static_cast<uint64_t>(static_cast<int64_t>(x));
            for (int64_t j = 0; j < m; ++j) orow[j] = static_cast<R>(xu * static_cast<uint64_t>(static_cast<int64_t>(brow[j])));
          }
        }
      });
    });
  });
}

// ---- Linear (linear_forward_kernel, linear_backward_kernel) ----

// A [rows, cols] matrix over t's memory (t's leading dims folded into rows): t itself when BLAS
// can read it in place, else a contiguous copy.
struct Matrix {
  Tensor data;
  Layout layout;
};
Matrix as_matrix(const Tensor& t, int64_t rows, int64_t cols) {
  if (t.dim() == 1) {
    if (auto l = blas_layout(1, cols, cols * t.stride(0), t.stride(0))) return {t, *l};
  } else if (t.dim() == 2) {
    if (auto l = blas_layout(rows, cols, t.stride(0), t.stride(1))) return {t, *l};
  } else if (auto l = blas_layout(t.size(-2), cols, t.stride(-2), t.stride(-1)); l && !l->trans) {
    if (auto ld = fold_rows(t, cols)) return {t, Layout{false, *ld}};
  }
  return {raw_copy(t, t.dtype()), Layout{false, std::max<int64_t>(1, cols)}};
}

bool is_blas_float(DType dt) { return dt == kFloat32 || dt == kFloat64; }
// The dtypes the Linear fast paths take: OpenBLAS's, and bfloat16 while oneDNN is active.
bool is_linear_fast(DType dt) { return is_blas_float(dt) || (dt == kBFloat16 && backend::cpu::onednn::active()); }

// The usual case of a forward: no w.t() view and no matmul dispatch; the bias rows first, then
// C = X @ W^T + C in one GEMM (bfloat16: a contiguous [out_f] bias goes into oneDNN's primitive).
bool linear_forward_kernel(const Tensor& C, const Tensor& X, const Tensor& w, const Tensor& bias) {
  const int64_t rows = X.size(0), in = X.size(1), out_f = w.size(0);
  if (!is_linear_fast(X.dtype()) || X.numel() == 0 || out_f == 0) return false;
  const auto lx = blas_layout(rows, in, X.stride(0), X.stride(1));
  const auto lw = blas_layout(in, out_f, w.stride(1), w.stride(0));  // w.t() as BLAS reads it
  if (!lx || !lw) return false;
  bool done = false;
  backend::dispatch_floating(X.dtype(), "linear", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, BFloat16>) {
      using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
      T* c = static_cast<T*>(C.data_ptr());
      const T* fused = nullptr;  // bfloat16's bias vector, added by the GEMM itself
      bool prefilled = false;
      if (bias.defined()) {
        const T* bp = static_cast<const T*>(bias.data_ptr());
        const int64_t bs = (bias.dim() == 1 && bias.size(0) == out_f) ? bias.stride(0) : 0;  // [out_f], or one value broadcast
        if (std::is_same_v<T, BFloat16> && (bs == 1 || out_f == 1) && bias.dim() == 1) {
          fused = bp;
        } else {
          if (bs == 0 || out_f == 1) {
            std::fill_n(c, rows * out_f, bp[0]);
          } else {
            for (int64_t j = 0; j < out_f; ++j) c[j] = bp[j * bs];
            for (int64_t r = 1; r < rows; ++r) std::copy_n(c, out_f, c + r * out_f);
          }
          prefilled = true;
        }
      }
      const T* x = static_cast<const T*>(X.data_ptr());
      const T* wp = static_cast<const T*>(w.data_ptr());
      if constexpr (std::is_same_v<T, BFloat16>)
        done = backend::cpu::onednn::gemm_bf16(lx->trans, lw->trans, rows, out_f, in, 1.0f, x, lx->ld, wp, lw->ld, prefilled ? 1.0f : 0.0f, c, out_f,
                                               fused);
      else
        done = lib_gemm(lx->trans, lw->trans, rows, out_f, in, S(1), x, lx->ld, wp, lw->ld, S(prefilled ? 1 : 0), c, out_f);
    }
  });
  return done;  // false (oneDNN without a kernel for this shape): the op's general path rewrites C
}

// dx = G @ W and dw = G^T @ X as two GEMMs on the operands as they lie (a copy only for what BLAS
// cannot read in place): no views, shape checks or graph.
bool linear_backward_kernel(const Tensor& grad, const Tensor& x, const Tensor& w, int64_t rows, int64_t in, int64_t out_f, Tensor& dx, Tensor& dw) {
  const DType dt = grad.dtype();
  if (!is_linear_fast(dt)) return false;
  const Matrix G = as_matrix(grad, rows, out_f);
  auto gemm = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, const Tensor& out) {
    bool ok = false;
    backend::dispatch_floating(dt, "linear", [&]<typename T>() {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, BFloat16>) {
        using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
        ok = lib_gemm(ta, tb, m, n, k, S(1), static_cast<const T*>(A.data_ptr()), lda, static_cast<const T*>(B.data_ptr()), ldb, S(0),
                      static_cast<T*>(out.data_ptr()), n);
      }
    });
    return ok;
  };
  Tensor gx, gw;
  if (w.defined()) {  // dx [rows, in] = G [rows, out_f] @ W [out_f, in], shaped as x
    const Matrix W = as_matrix(w, out_f, in);
    Shape x_shape(grad.sizes().begin(), grad.sizes().end() - 1);
    x_shape.push_back(in);
    gx = make_empty(x_shape, dt, grad.device());
    if (!gemm(G.layout.trans, W.layout.trans, rows, in, out_f, G.data, G.layout.ld, W.data, W.layout.ld, gx)) return false;
  }
  if (x.defined()) {  // dw [out_f, in] = G^T [out_f, rows] @ X [rows, in]
    const Matrix X = as_matrix(x, rows, in);
    gw = make_empty({out_f, in}, dt, grad.device());
    if (!gemm(!G.layout.trans, X.layout.trans, out_f, in, rows, G.data, G.layout.ld, X.data, X.layout.ld, gw)) return false;
  }
  dx = gx;  // only now: a false return leaves dx and dw as they were
  dw = gw;
  return true;
}

}  // namespace

void register_linalg_kernels() {
  DP_REGISTER_KERNEL(CPU, matmul_kernel);
  DP_REGISTER_KERNEL(CPU, matmul_bias_kernel);
  DP_REGISTER_KERNEL(CPU, dot_kernel);
  DP_REGISTER_KERNEL(CPU, outer_kernel);
  DP_REGISTER_KERNEL(CPU, linear_forward_kernel);
  DP_REGISTER_KERNEL(CPU, linear_backward_kernel);
}

}  // namespace dp::backend::cpu
