// nll_loss: one pass over the targets reading one input element each (input seen as [N, C, S]),
// checking each target, summing the weighted losses and the weights of the non-ignored targets.
// Backward: a zero-filled gradient with -weight[t] * g scattered at the targets. The gradient does
// not depend on the input, so under create_graph it is that same kernel's result (for a unit
// gradient) times g with dp ops: differentiable w.r.t. g, with no path back to the input.
// On a CUDA device: the kernels of cuda/loss.h. Mean's total weight stays on the device (a 0-dim
// tensor the backward divides by), so neither pass reads a value on the host.
#include <cstring>
#include "dp/ops/elementwise.h"
#include "ops/loss_common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using loss::ClassGeometry;

constexpr const char* kOp = "nll_loss";

// Writes the per-sample losses to out (None; may be null) and returns the sum; tw gets the sum of
// the weights of the non-ignored targets.
template <typename T, typename I>
double nll_forward(const T* x, const I* tg, const T* w, T* out, const ClassGeometry& geo, int64_t ignore, double& tw) {
  double sum = 0, wsum = 0;
  const int64_t C = geo.c, S = geo.s;
  for (int64_t n = 0; n < geo.n; ++n) {
    const T* xn = x + n * C * S;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = n * S + s;
      const int64_t t = static_cast<int64_t>(tg[i]);
      if (t == ignore) {
        if (out) out[i] = T(0);
        continue;
      }
      if (t < 0 || t >= C) [[unlikely]] loss::throw_target_out_of_bounds(kOp, t, C, ignore);
      const T wt = w ? w[t] : T(1);
      const T v = -wt * xn[t * S + s];
      if (out) out[i] = v;
      sum += static_cast<double>(v);
      wsum += static_cast<double>(wt);
    }
  }
  tw = wsum;
  return sum;
}

// gi (zero-filled, input's shape) [n, t, s] = -weight[t] * G, G = g[i] (per-sample, None) or gs.
template <typename T, typename I>
void nll_backward(T* gi, const I* tg, const T* w, const T* g, T gs, const ClassGeometry& geo, int64_t ignore) {
  const int64_t C = geo.c, S = geo.s;
  for (int64_t n = 0; n < geo.n; ++n) {
    T* gn = gi + n * C * S;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = n * S + s;
      const int64_t t = static_cast<int64_t>(tg[i]);
      if (t == ignore || t < 0 || t >= C) continue;  // range was checked by the forward
      const T G = g ? g[i] : gs;
      gn[t * S + s] = -(w ? w[t] : T(1)) * G;
    }
  }
}

template <typename F>
void dispatch_nll(DType x, DType t, F&& f) {
  kernels::dispatch_floating(x, kOp, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (t == kUInt8) f.template operator()<T, uint8_t>();
      else f.template operator()<T, int64_t>();
    }
  });
}

// The gradient w.r.t. the input for a per-sample gradient g (None) or a reduced one (already
// scaled by 1 / total weight for Mean); g undefined means a unit per-sample gradient.
Tensor nll_grad(const Shape& in_shape, DType dtype, Device device, const Tensor& t, const Tensor& w, const Tensor& g, double gs,
                const ClassGeometry& geo, int64_t ignore) {
  Tensor gi = make_empty(in_shape, dtype, device);
  if (gi.numel() > 0) std::memset(gi.data_ptr(), 0, gi.nbytes());
  dispatch_nll(gi.dtype(), t.dtype(), [&]<typename T, typename I>() {
    const Tensor gp = g.defined() ? loss::plain(g, gi.dtype()) : Tensor();
    nll_backward<T, I>(static_cast<T*>(gi.data_ptr()), static_cast<const I*>(t.data_ptr()),
                       w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr,
                       gp.defined() ? static_cast<const T*>(gp.data_ptr()) : nullptr, static_cast<T>(gs), geo, ignore);
  });
  return gi;
}

#if DP_HAVE_CUDA
cuda::ClassShape class_shape(const ClassGeometry& geo) { return cuda::ClassShape{geo.n, geo.c, geo.s}; }

Tensor nll_loss_cuda(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore, Reduction red, const ClassGeometry& geo) {
  const Tensor x = kernels::contiguous_nograd(input);
  const Tensor t = kernels::contiguous_nograd(target);
  const Tensor w = weight.defined() ? kernels::contiguous_nograd(weight) : Tensor();
  const bool reduced = red != Reduction::None;
  Tensor out = make_empty(reduced ? Shape{} : geo.out_shape, x.dtype(), x.device());
  Tensor tw = reduced ? make_empty({}, cuda::loss_acc_dtype(x.dtype()), x.device()) : Tensor();
  if (cuda::nll_loss_forward(out, red, tw, x, t, w, class_shape(geo), ignore)) loss::throw_first_bad_target(kOp, t, geo.c, ignore);
  if (autograd::needs_grad(input)) {
    SavedVariable st(t, false);
    autograd::record("NllLossBackward0", {input}, {out}, [st, w, geo, ignore, red, tw, in_shape = x.sizes(), dtype = x.dtype(), device = x.device()](
                                                             variable_list&& grads) {
      const Tensor& g = grads[0];
      const Tensor tt = st.unpack();
      cuda::LossGrad lg;
      if (red == Reduction::Mean) lg.divisor = tw;
      Tensor gi = make_empty(in_shape, dtype, device);
      if (GradMode::is_enabled()) {
        // grad = K * g with K the gradient for a unit g (Mean's 1 / total weight included).
        {
          NoGradGuard no_grad;
          lg.g = loss::device_scalar(1.0, dtype, device);
          cuda::nll_loss_backward(gi, lg, tt, w, class_shape(geo), ignore);
        }
        return variable_list{dp::mul(gi, red == Reduction::None ? loss::per_sample_to_input(g, geo) : g)};
      }
      lg.g = loss::plain(g, dtype);
      lg.per_sample = red == Reduction::None;
      cuda::nll_loss_backward(gi, lg, tt, w, class_shape(geo), ignore);
      return variable_list{gi};
    });
  }
  return out;
}
#endif

}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index, Reduction reduction) {
  if (autocast::detail::Cast ac{autocast::detail::Op::nll_loss, {&input, &target, &weight}})
    return ac([&] { return dp::nll_loss(ac[0], ac[1], ac[2], ignore_index, reduction); });
  loss::check_input(kOp, input);
  ops::check_defined(kOp, target, "target");
  ops::check_same_device(kOp, {&input, &target});
  loss::check_class_target_dtype(kOp, target);
  const ClassGeometry geo = loss::class_geometry(kOp, input, target);
  loss::check_class_weight(kOp, input, weight, geo.c);
#if DP_HAVE_CUDA
  if (input.is_cuda()) return nll_loss_cuda(input, target, weight, ignore_index, reduction, geo);
#endif

  const Tensor x = kernels::contiguous_nograd(input);
  const Tensor t = kernels::contiguous_nograd(target);
  const Tensor w = weight.defined() ? kernels::contiguous_nograd(weight) : Tensor();
  Tensor out = reduction == Reduction::None ? make_empty(geo.out_shape, x.dtype(), x.device()) : Tensor();
  double tw = 0, total = 0;
  dispatch_nll(x.dtype(), t.dtype(), [&]<typename T, typename I>() {
    total = nll_forward<T, I>(static_cast<const T*>(x.data_ptr()), static_cast<const I*>(t.data_ptr()),
                              w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr,
                              out.defined() ? static_cast<T*>(out.data_ptr()) : nullptr, geo, ignore_index, tw);
  });
  if (reduction == Reduction::Mean) out = loss::scalar_result(total / tw, x.dtype(), x.device());
  else if (reduction == Reduction::Sum) out = loss::scalar_result(total, x.dtype(), x.device());

  if (autograd::needs_grad(input)) {
    SavedVariable st(t, false);
    autograd::record("NllLossBackward0", {input}, {out},
                     [st, w, geo, ignore_index, reduction, tw, in_shape = x.sizes(), dtype = x.dtype(), device = x.device()](
                         variable_list&& grads) {
                       const Tensor& g = grads[0];
                       const Tensor tt = st.unpack();
                       const double scale = reduction == Reduction::Mean ? 1.0 / tw : 1.0;
                       if (GradMode::is_enabled()) {
                         // grad = K * g with K the gradient for a unit g: linear in g, constant in x.
                         Tensor K;
                         {
                           NoGradGuard no_grad;
                           K = nll_grad(in_shape, dtype, device, tt, w, Tensor(), scale, geo, ignore_index);
                         }
                         const Tensor gb = reduction == Reduction::None ? loss::per_sample_to_input(g, geo) : g;
                         return variable_list{dp::mul(K, gb)};
                       }
                       if (reduction == Reduction::None)
                         return variable_list{nll_grad(in_shape, dtype, device, tt, w, g, 0.0, geo, ignore_index)};
                       return variable_list{
                           nll_grad(in_shape, dtype, device, tt, w, Tensor(), loss::scalar_value(g) * scale, geo, ignore_index)};
                     });
  }
  return out;
}

}  // namespace dp
