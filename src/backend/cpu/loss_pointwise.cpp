// The CPU kernels of the element-wise losses, mse_loss, l1_loss, binary_cross_entropy and
// binary_cross_entropy_with_logits (the kernel interface: backend/loss_kernels.h; the op and its
// argument checks: src/ops/loss_pointwise.cpp). Float32 and float64.
//
// Forward: one pass over the contiguous input and target computing each loss (times the weight)
// and either storing it (None) or summing it (Mean / Sum) in double lanes. weight and pos_weight
// broadcast to the input's shape: the iteration walks runs of the coalesced innermost dims in
// which each of them is either one value or contiguous, and the inner loops are compiled for
// those shapes so they vectorise.
// Backward: one fused pass writing d(loss)/d(input) and/or d(loss)/d(target).
#include <algorithm>
#include <cmath>
#include "backend/cpu/loss_common.h"
#include "backend/elementwise_math.h"

namespace dp::backend::cpu {
namespace {

using Kind = PointwiseKind;
using cpu::loss::Accum;
using cpu::loss::Ptr;
using cpu::loss::Val;
using backend::m_exp;
using backend::m_log;
using backend::m_log1p;
using backend::sel;

// ---- iteration over a contiguous shape with up to two broadcast side tensors ----

// Runs of the innermost coalesced dim of `shape` (every main operand is contiguous with this
// shape), with the offsets of two side tensors (contiguous, broadcastable to `shape`; either may be
// undefined). Within a run each side's stride is 0 (one value) or 1 (contiguous).
class SideIter {
 public:
  SideIter(IntArrayRef shape, const Tensor& a, const Tensor& b) {
    const int64_t nd = static_cast<int64_t>(shape.size());
    numel_ = numel_of(shape);
    Shape st[2] = {Shape(nd, 0), Shape(nd, 0)};
    const Tensor* sides[2] = {&a, &b};
    for (int k = 0; k < 2; ++k) {
      if (!sides[k]->defined()) continue;
      const Tensor& t = *sides[k];
      const int64_t td = t.dim();
      for (int64_t d = 0; d < td; ++d) {
        const int64_t od = d + nd - td;
        st[k][od] = (t.sizes()[d] == 1 && shape[od] != 1) ? 0 : t.strides()[d];
      }
    }
    const Shape main = contiguous_strides(shape);
    Shape ms;
    for (int64_t d = 0; d < nd; ++d) {
      if (shape[d] == 1) continue;
      if (!sizes_.empty() && ms.back() == main[d] * shape[d] && stride_[0].back() == st[0][d] * shape[d] &&
          stride_[1].back() == st[1][d] * shape[d]) {
        sizes_.back() *= shape[d];
        ms.back() = main[d];
        stride_[0].back() = st[0][d];
        stride_[1].back() = st[1][d];
        continue;
      }
      sizes_.push_back(shape[d]);
      ms.push_back(main[d]);
      stride_[0].push_back(st[0][d]);
      stride_[1].push_back(st[1][d]);
    }
  }

  // f(main_offset, a_offset, b_offset, n, a_inner_stride, b_inner_stride)
  template <typename F>
  void for_each(F&& f) const {
    if (numel_ == 0) return;
    const int64_t nd = static_cast<int64_t>(sizes_.size());
    if (nd == 0) {
      f(int64_t(0), int64_t(0), int64_t(0), int64_t(1), int64_t(0), int64_t(0));
      return;
    }
    const int64_t n = sizes_[nd - 1];
    const int64_t ia = stride_[0][nd - 1], ib = stride_[1][nd - 1];
    DP_CHECK((ia == 0 || ia == 1) && (ib == 0 || ib == 1), ValueError, "loss: internal error: side operand stride ", ia, ", ", ib);
    Shape idx(nd, 0);
    int64_t main = 0, oa = 0, ob = 0;
    for (;;) {
      f(main, oa, ob, n, ia, ib);
      main += n;
      int64_t d = nd - 2;
      for (; d >= 0; --d) {
        oa += stride_[0][d];
        ob += stride_[1][d];
        if (++idx[d] < sizes_[d]) break;
        oa -= stride_[0][d] * sizes_[d];
        ob -= stride_[1][d] * sizes_[d];
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  }

 private:
  int64_t numel_ = 0;
  Shape sizes_;
  Shape stride_[2];
};

// Calls f with a Val (absent: 1, or stride 0) or Ptr view of a side operand at offset `off`.
template <typename T, typename F>
void with_side(const Tensor& side, int64_t off, int64_t inner_stride, F&& f) {
  if (!side.defined()) return f(Val<T>{T(1)});
  const T* p = static_cast<const T*>(side.data_ptr()) + off;
  if (inner_stride == 0) return f(Val<T>{*p});
  return f(Ptr<T>{p});
}

// ---- element math (T is float or double; float uses the vectorisable math) ----

template <typename T>
DP_INLINE T clamp_log(T v) {
  return sel(v < T(-100), T(-100), v);  // PyTorch clamps each log at -100
}

// softplus(-x) = log(1 + e^-x), stably: max(-x, 0) + log1p(e^-|x|).
template <typename T>
DP_INLINE T softplus_neg(T x) {
  const T ax = std::fabs(x);
  return sel(x < T(0), -x, T(0)) + m_log1p(m_exp(-ax));
}

template <Kind K, typename T>
DP_INLINE T elem_loss(T x, T t, T pw) {
  if constexpr (K == Kind::Mse) {
    const T d = x - t;
    return d * d;
  } else if constexpr (K == Kind::L1) {
    return std::fabs(x - t);
  } else if constexpr (K == Kind::Bce) {
    return (t - T(1)) * clamp_log(m_log1p(-x)) - t * clamp_log(m_log(x));
  } else {
    return (T(1) - t) * x + (T(1) + (pw - T(1)) * t) * softplus_neg(x);
  }
}

// d loss / d input.
template <Kind K, typename T>
DP_INLINE T elem_dx(T x, T t, T pw) {
  if constexpr (K == Kind::Mse) {
    return T(2) * (x - t);
  } else if constexpr (K == Kind::L1) {
    const T d = x - t;
    return static_cast<T>(d > T(0)) - static_cast<T>(d < T(0));
  } else if constexpr (K == Kind::Bce) {
    const T den = (T(1) - x) * x;
    return (x - t) / sel(den < T(kBceEps), T(kBceEps), den);
  } else {
    const T s = T(1) / (T(1) + m_exp(-x));
    return (T(1) + (pw - T(1)) * t) * s - pw * t;
  }
}

// d loss / d target.
template <Kind K, typename T>
DP_INLINE T elem_dt(T x, T t, T pw) {
  if constexpr (K == Kind::Mse || K == Kind::L1) {
    return -elem_dx<K, T>(x, t, pw);
  } else if constexpr (K == Kind::Bce) {
    return m_log1p(-x) - m_log(x);  // -logit(x)
  } else {
    return -x + (pw - T(1)) * softplus_neg(x);
  }
}

// ---- typed kernels ----

// 1 if v is outside [0, 1] or NaN; bitwise (no short-circuit branch) so the loops vectorise.
template <typename T>
DP_INLINE int outside_unit(T v) {
  return 1 - (static_cast<int>(v >= T(0)) & static_cast<int>(v <= T(1)));
}

// Stores the losses in `out` (None) or returns their sum. Sets `bad` when a BCE input is outside
// [0, 1] (or NaN).
template <Kind K, typename T>
double forward_kernel(const Tensor& out, const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw, bool& bad) {
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* tp = static_cast<const T*>(t.data_ptr());
  T* op = out.defined() ? static_cast<T*>(out.data_ptr()) : nullptr;
  Accum acc;
  int out_of_range = 0;
  SideIter it(x.sizes(), w, pw);
  it.for_each([&](int64_t m, int64_t oa, int64_t ob, int64_t n, int64_t ia, int64_t ib) {
    with_side<T>(w, oa, ia, [&](auto W) {
      with_side<T>(pw, ob, ib, [&](auto P) {
        const T* xr = xp + m;
        const T* tr = tp + m;
        int b = 0;
        if (op != nullptr) {
          T* o = op + m;
          for (int64_t j = 0; j < n; ++j) {
            if constexpr (K == Kind::Bce) b |= outside_unit(xr[j]);
            o[j] = elem_loss<K, T>(xr[j], tr[j], P[j]) * W[j];
          }
        } else {
          constexpr int64_t kChunk = 256;
          T buf[kChunk];
          for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
            const int64_t len = std::min(kChunk, n - j0);
            for (int64_t j = 0; j < len; ++j) {
              const int64_t e = j0 + j;
              if constexpr (K == Kind::Bce) b |= outside_unit(xr[e]);
              buf[j] = elem_loss<K, T>(xr[e], tr[e], P[e]) * W[e];
            }
            acc.add(buf, len);
          }
        }
        out_of_range |= b;
      });
    });
  });
  bad = out_of_range != 0;
  return acc.total();
}

// gi = G * W * dloss/dx, gt = G * W * dloss/dt with G = g[j] (None: g has the input's shape) or
// gs (g undefined: a reduced gradient, already scaled). gi / gt may be undefined (not needed).
template <Kind K, typename T>
void backward_kernel(const Tensor& gi, const Tensor& gt, const Tensor& g, T gs, const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw) {
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* tp = static_cast<const T*>(t.data_ptr());
  const T* gp = g.defined() ? static_cast<const T*>(g.data_ptr()) : nullptr;
  T* gip = gi.defined() ? static_cast<T*>(gi.data_ptr()) : nullptr;
  T* gtp = gt.defined() ? static_cast<T*>(gt.data_ptr()) : nullptr;
  SideIter it(x.sizes(), w, pw);
  it.for_each([&](int64_t m, int64_t oa, int64_t ob, int64_t n, int64_t ia, int64_t ib) {
    with_side<T>(w, oa, ia, [&](auto W) {
      with_side<T>(pw, ob, ib, [&](auto P) {
        auto run = [&](auto G) {
          const T* xr = xp + m;
          const T* tr = tp + m;
          if (gip != nullptr && gtp != nullptr) {
            T* a = gip + m;
            T* b = gtp + m;
            for (int64_t j = 0; j < n; ++j) {
              const T f = G[j] * W[j];
              a[j] = f * elem_dx<K, T>(xr[j], tr[j], P[j]);
              b[j] = f * elem_dt<K, T>(xr[j], tr[j], P[j]);
            }
          } else if (gip != nullptr) {
            T* a = gip + m;
            for (int64_t j = 0; j < n; ++j) a[j] = G[j] * W[j] * elem_dx<K, T>(xr[j], tr[j], P[j]);
          } else {
            T* b = gtp + m;
            for (int64_t j = 0; j < n; ++j) b[j] = G[j] * W[j] * elem_dt<K, T>(xr[j], tr[j], P[j]);
          }
        };
        if (gp == nullptr)
          run(Val<T>{gs});
        else
          run(Ptr<T>{gp + m});
      });
    });
  });
}

bool pointwise_loss_forward_kernel(Kind k, const Tensor& out, bool reduced, double scale, const Tensor& x, const Tensor& t, const Tensor& w,
                                   const Tensor& pw) {
  bool bad = false;
  const Tensor per_element = reduced ? Tensor() : out;
  cpu::loss::dispatch_real(x.dtype(), pointwise_loss_name(k), [&]<typename T>() {
    double total = 0;
    switch (k) {
      case Kind::Mse:
        total = forward_kernel<Kind::Mse, T>(per_element, x, t, w, pw, bad);
        break;
      case Kind::L1:
        total = forward_kernel<Kind::L1, T>(per_element, x, t, w, pw, bad);
        break;
      case Kind::Bce:
        total = forward_kernel<Kind::Bce, T>(per_element, x, t, w, pw, bad);
        break;
      case Kind::BceLogits:
        total = forward_kernel<Kind::BceLogits, T>(per_element, x, t, w, pw, bad);
        break;
    }
    if (reduced) static_cast<T*>(out.data_ptr())[0] = static_cast<T>(total * scale);
  });
  return bad;
}

void pointwise_loss_backward_kernel(Kind k, const Tensor& gi, const Tensor& gt, const LossGrad& g, const Tensor& x, const Tensor& t, const Tensor& w,
                                    const Tensor& pw) {
  cpu::loss::dispatch_real(x.dtype(), pointwise_loss_name(k), [&]<typename T>() {
    const cpu::loss::Incoming<T> in = cpu::loss::incoming<T>(g);
    const Tensor gfull = g.per_sample ? g.g : Tensor();
    switch (k) {
      case Kind::Mse:
        backward_kernel<Kind::Mse, T>(gi, gt, gfull, in.value, x, t, w, pw);
        break;
      case Kind::L1:
        backward_kernel<Kind::L1, T>(gi, gt, gfull, in.value, x, t, w, pw);
        break;
      case Kind::Bce:
        backward_kernel<Kind::Bce, T>(gi, gt, gfull, in.value, x, t, w, pw);
        break;
      case Kind::BceLogits:
        backward_kernel<Kind::BceLogits, T>(gi, gt, gfull, in.value, x, t, w, pw);
        break;
    }
  });
}

}  // namespace

void register_pointwise_loss_kernels() {
  DP_REGISTER_KERNEL(CPU, pointwise_loss_forward_kernel);
  DP_REGISTER_KERNEL(CPU, pointwise_loss_backward_kernel);
}

}  // namespace dp::backend::cpu
