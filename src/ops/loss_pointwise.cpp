// Element-wise losses: mse_loss, l1_loss, binary_cross_entropy, binary_cross_entropy_with_logits.
//
// Forward: one pass over the contiguous input and target computing each loss (times the weight)
// and either storing it (None) or summing it (Mean / Sum) in double lanes. weight and pos_weight
// broadcast to the input's shape: the iteration walks runs of the coalesced innermost dims in
// which each of them is either one value or contiguous, and the inner loops are compiled for
// those shapes so they vectorise.
// Backward: one fused pass writing d(loss)/d(input) and/or d(loss)/d(target). Under create_graph
// the same formulas are written with dp ops, so they can be differentiated again.
// On a CUDA device the forward and backward passes are the kernels of cuda/loss.h (the sum of a
// reduced loss stays on the device; the backward reads the gradient there).
#include <algorithm>
#include "core/kernels/elementwise_math.h"
#include "dp/ops/elementwise.h"
#include "ops/loss_common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using kernels::m_exp;
using kernels::m_log;
using kernels::m_log1p;
using kernels::sel;
using loss::Accum;
using loss::Ptr;
using loss::Val;

enum class Kind { Mse, L1, Bce, BceLogits };

const char* op_name(Kind k) {
  switch (k) {
    case Kind::Mse: return "mse_loss";
    case Kind::L1: return "l1_loss";
    case Kind::Bce: return "binary_cross_entropy";
    case Kind::BceLogits: return "binary_cross_entropy_with_logits";
  }
  return "?";
}

const char* node_name(Kind k) {
  switch (k) {
    case Kind::Mse: return "MseLossBackward0";
    case Kind::L1: return "L1LossBackward0";
    case Kind::Bce: return "BinaryCrossEntropyBackward0";
    case Kind::BceLogits: return "BinaryCrossEntropyWithLogitsBackward0";
  }
  return "?";
}

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

// The floor of x (1 - x) in the BCE gradient: PyTorch's EPSILON is the float 1e-12 (so in float64
// it is 9.99999996e-13).
constexpr float kBceEps = 1e-12f;

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
void backward_kernel(const Tensor& gi, const Tensor& gt, const Tensor& g, T gs, const Tensor& x, const Tensor& t,
                     const Tensor& w, const Tensor& pw) {
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
        if (gp == nullptr) run(Val<T>{gs});
        else run(Ptr<T>{gp + m});
      });
    });
  });
}

// ---- the differentiable (create_graph) backward, with dp ops ----

variable_list composite_backward(Kind k, const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw,
                                 Reduction red, int64_t numel, bool need_x, bool need_t) {
  const Tensor gs = red == Reduction::Mean ? dp::div(g, static_cast<double>(numel)) : g;
  Tensor gx, gt;
  switch (k) {
    case Kind::Mse: {
      Tensor d = dp::mul(dp::mul(dp::sub(x, t), 2.0), gs);
      if (need_x) gx = d;
      if (need_t) gt = dp::neg(d);
      break;
    }
    case Kind::L1: {
      Tensor d = dp::mul(dp::sign(dp::sub(x, t)), gs);
      if (need_x) gx = d;
      if (need_t) gt = dp::neg(d);
      break;
    }
    case Kind::Bce:
      if (need_x) gx = dp::div(dp::mul(dp::sub(x, t), gs), dp::clamp_min(dp::mul(dp::rsub(x, 1.0), x), static_cast<double>(kBceEps)));
      if (need_t) gt = dp::mul(dp::sub(dp::log1p(dp::neg(x)), dp::log(x)), gs);
      break;
    case Kind::BceLogits: {
      // softplus(-x) = log1p(exp(-|x|)) + relu(-x), written with dp ops (differentiable).
      Tensor sp = dp::add(dp::log1p(dp::exp(dp::neg(dp::abs(x)))), dp::relu(dp::neg(x)));
      if (pw.defined()) {
        Tensor lw = dp::add(dp::mul(dp::sub(pw, 1.0), t), 1.0);
        if (need_x) gx = dp::mul(dp::sub(dp::mul(lw, dp::sigmoid(x)), dp::mul(pw, t)), gs);
        if (need_t) gt = dp::mul(dp::sub(dp::mul(dp::sub(pw, 1.0), sp), x), gs);
      } else {
        if (need_x) gx = dp::mul(dp::sub(dp::sigmoid(x), t), gs);
        if (need_t) gt = dp::mul(dp::neg(x), gs);
      }
      break;
    }
  }
  if (w.defined()) {
    if (gx.defined()) gx = dp::mul(gx, w);
    if (gt.defined()) gt = dp::mul(gt, w);
  }
  return {gx, gt};
}

// ---- CUDA ----

#if DP_HAVE_CUDA
cuda::PointwiseKind cuda_kind(Kind k) {
  switch (k) {
    case Kind::Mse: return cuda::PointwiseKind::Mse;
    case Kind::L1: return cuda::PointwiseKind::L1;
    case Kind::Bce: return cuda::PointwiseKind::Bce;
    case Kind::BceLogits: return cuda::PointwiseKind::BceLogits;
  }
  return cuda::PointwiseKind::Mse;
}

// The forward on the device: the losses (None) or their scaled sum, as a 0-dim tensor there.
// Returns whether a BCE input lay outside [0, 1] (the kernel's flag).
bool cuda_forward(Kind k, const Tensor& out, Reduction red, const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw) {
  const double scale = red == Reduction::Mean ? 1.0 / static_cast<double>(x.numel()) : 1.0;  // Mean of nothing: 0 * inf = NaN
  return cuda::pointwise_loss_forward(cuda_kind(k), out, red != Reduction::None, scale, x, t, w, pw);
}

void cuda_backward(Kind k, const Tensor& gi, const Tensor& gt, const Tensor& g, Reduction red, int64_t numel, const Tensor& x, const Tensor& t,
                   const Tensor& w, const Tensor& pw) {
  cuda::LossGrad lg;
  lg.g = loss::plain(g, x.dtype());
  lg.per_sample = red == Reduction::None;
  lg.scale = red == Reduction::Mean ? 1.0 / static_cast<double>(numel) : 1.0;
  cuda::pointwise_loss_backward(cuda_kind(k), gi, gt, lg, x, t, w, pw);
}
#endif

// ---- the op ----

void check_side(const char* op, const Tensor& input, const Tensor& side, const char* what) {
  if (!side.defined()) return;
  loss::check_companion(op, input, side, what);
  loss::check_constant(op, side, what);
  Shape b;
  try {
    b = broadcast_shapes(side.sizes(), input.sizes(), op);
  } catch (const ShapeError& e) {
    throw ShapeError(detail::str(op, ": ", what, " of shape ", side.size_str(), " does not broadcast to the input's shape ",
                                 input.size_str(), " (", e.what(), ")"));
  }
  DP_CHECK(b == input.sizes(), ShapeError, op, ": ", what, " of shape ", side.size_str(), " does not broadcast to the input's shape ",
           input.size_str(), " (the broadcast shape would be ", shape_str(b), ")");
}

Tensor pointwise_loss(Kind k, const Tensor& input, const Tensor& target, const Tensor& weight, const Tensor& pos_weight, Reduction red) {
  const char* op = op_name(k);
  loss::check_input(op, input);
  ops::check_defined(op, target, "target");
  loss::check_companion(op, input, target, "target");
  if (input.sizes() != target.sizes()) {
    if (k == Kind::Bce)
      throw ShapeError(detail::str(op, ": Using a target size (", target.size_str(), ") that is different to the input size (",
                                   input.size_str(), ") is deprecated. Please ensure they have the same size."));
    if (k == Kind::BceLogits)
      throw ShapeError(detail::str(op, ": Target size (", target.size_str(), ") must be the same as input size (", input.size_str(), ")"));
    throw ShapeError(detail::str(op, ": target size (", target.size_str(), ") differs from input size (", input.size_str(),
                                 "); PyTorch would broadcast them with a warning (\"this will likely lead to incorrect results\"), "
                                 "dparallel requires the same size"));
  }
  check_side(op, input, weight, "weight");
  check_side(op, input, pos_weight, "pos_weight");

  const Tensor x = kernels::contiguous_nograd(input);
  const Tensor t = kernels::contiguous_nograd(target);
  const Tensor w = weight.defined() ? kernels::contiguous_nograd(weight) : Tensor();
  const Tensor pw = pos_weight.defined() ? kernels::contiguous_nograd(pos_weight) : Tensor();
  const int64_t numel = x.numel();

  Tensor out = red == Reduction::None ? make_empty(x.sizes(), x.dtype(), x.device()) : Tensor();
  bool bad = false;
  double total = 0;
#if DP_HAVE_CUDA
  if (x.is_cuda()) {
    if (red != Reduction::None) out = make_empty({}, x.dtype(), x.device());
    bad = cuda_forward(k, out, red, x, t, w, pw);
  } else
#endif
  total = kernels::dispatch_floating(x.dtype(), op, [&]<typename T>() -> double {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      switch (k) {
        case Kind::Mse: return forward_kernel<Kind::Mse, T>(out, x, t, w, pw, bad);
        case Kind::L1: return forward_kernel<Kind::L1, T>(out, x, t, w, pw, bad);
        case Kind::Bce: return forward_kernel<Kind::Bce, T>(out, x, t, w, pw, bad);
        case Kind::BceLogits: return forward_kernel<Kind::BceLogits, T>(out, x, t, w, pw, bad);
      }
    }
    return 0.0;
  });
  DP_CHECK(!bad, ValueError, op, ": all elements of input should be between 0 and 1 (input ", input.describe(), ")");
  const bool on_host = !x.is_cuda();  // the CUDA kernels wrote the 0-dim result already
  if (on_host && red == Reduction::Mean) out = loss::scalar_result(total / static_cast<double>(numel), x.dtype(), x.device());
  else if (on_host && red == Reduction::Sum) out = loss::scalar_result(total, x.dtype(), x.device());

  const bool need_x = autograd::needs_grad(input);
  const bool need_t = autograd::needs_grad(target);
  if (need_x || need_t) {
    SavedVariable sx(input, false), st(target, false);
    autograd::record(node_name(k), {input, target}, {out},
                     [k, sx, st, w, pw, red, numel, need_x, need_t](variable_list&& grads) -> variable_list {
                       const Tensor& g = grads[0];
                       Tensor xi = sx.unpack(), ti = st.unpack();
                       if (GradMode::is_enabled()) return composite_backward(k, g, xi, ti, w, pw, red, numel, need_x, need_t);
                       const Tensor xc = kernels::contiguous_nograd(xi), tc = kernels::contiguous_nograd(ti);
                       Tensor gi = need_x ? make_empty(xc.sizes(), xc.dtype(), xc.device()) : Tensor();
                       Tensor gt = need_t ? make_empty(xc.sizes(), xc.dtype(), xc.device()) : Tensor();
#if DP_HAVE_CUDA
                       if (xc.is_cuda()) {
                         cuda_backward(k, gi, gt, g, red, numel, xc, tc, w, pw);
                         return {gi, gt};
                       }
#endif
                       kernels::dispatch_floating(xc.dtype(), op_name(k), [&]<typename T>() {
                         if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                           Tensor gfull;
                           T gs = 0;
                           if (red == Reduction::None) {
                             gfull = loss::plain(g, xc.dtype());
                           } else {
                             const double gv = loss::scalar_value(g);
                             gs = static_cast<T>(red == Reduction::Mean ? gv / static_cast<double>(numel) : gv);
                           }
                           switch (k) {
                             case Kind::Mse: backward_kernel<Kind::Mse, T>(gi, gt, gfull, gs, xc, tc, w, pw); break;
                             case Kind::L1: backward_kernel<Kind::L1, T>(gi, gt, gfull, gs, xc, tc, w, pw); break;
                             case Kind::Bce: backward_kernel<Kind::Bce, T>(gi, gt, gfull, gs, xc, tc, w, pw); break;
                             case Kind::BceLogits: backward_kernel<Kind::BceLogits, T>(gi, gt, gfull, gs, xc, tc, w, pw); break;
                           }
                         }
                       });
                       return {gi, gt};
                     });
  }
  return out;
}

}  // namespace

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  if (autocast::detail::Cast ac{autocast::detail::Op::binary_cross_entropy, {&input, &target, &weight}})
    return ac([&] { return dp::binary_cross_entropy(ac[0], ac[1], ac[2], reduction); });
  return pointwise_loss(Kind::Bce, input, target, weight, Tensor(), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight, const Tensor& pos_weight,
                                        Reduction reduction) {
  if (autocast::detail::Cast ac{autocast::detail::Op::binary_cross_entropy_with_logits, {&input, &target, &weight, &pos_weight}})
    return ac([&] { return dp::binary_cross_entropy_with_logits(ac[0], ac[1], ac[2], ac[3], reduction); });
  return pointwise_loss(Kind::BceLogits, input, target, weight, pos_weight, reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast::detail::Cast ac{autocast::detail::Op::mse_loss, {&input, &target}}) 
    return ac([&] { return dp::mse_loss(ac[0], ac[1], reduction); });
  return pointwise_loss(Kind::Mse, input, target, Tensor(), Tensor(), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast::detail::Cast ac{autocast::detail::Op::l1_loss, {&input, &target}}) 
    return ac([&] { return dp::l1_loss(ac[0], ac[1], reduction); });
  return pointwise_loss(Kind::L1, input, target, Tensor(), Tensor(), reduction);
}

}  // namespace dp
