// nll_loss: loss_i = -w[t_i] * x[i, t_i] (0 for ignored samples); Mean divides the sum by the total
// weight of the non-ignored samples. Backward: -w[t] * g at each sample's target, 0 elsewhere. The
// gradient does not depend on the input, so under create_graph it is that same kernel's result
// for a unit gradient times g with dp ops: differentiable w.r.t. g, with no path back to the input.
// The passes are the kernels of backend/loss_kernels.h, one per device type (the CPU's in
// src/backend/cpu/loss_nll.cpp, CUDA's in src/backend/cuda/loss.cu). Mean's total weight stays on the
// input's device (a 0-dim tensor the backward divides by), so neither pass reads a value back.
#include "backend/loss_kernels.h"
#include "dp/ops/elementwise.h"
#include "ops/loss_common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using loss::ClassGeometry;

constexpr const char* kOp = "nll_loss";

}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index, Reduction reduction) {
  if (autocast::detail::Cast ac{autocast::detail::Op::nll_loss, {&input, &target, &weight}})
    return ac([&] { return dp::nll_loss(ac[0], ac[1], ac[2], ignore_index, reduction); });
  if (reduction == Reduction::Mean && MeanLossRecorder::current() != nullptr) {
    Tensor sum = dp::nll_loss(input, target, weight, ignore_index, Reduction::Sum);  // checks the arguments
    return loss::record_mean(sum, loss::class_mean_count(input, target, weight, ignore_index));
  }
  loss::check_input(kOp, input);
  ops::check_defined(kOp, target, "target");
  ops::check_same_device(kOp, {&input, &target});
  loss::check_class_target_dtype(kOp, target);
  const ClassGeometry geo = loss::class_geometry(kOp, input, target);
  loss::check_class_weight(kOp, input, weight, geo.c);

  const Tensor x = backend::contiguous_nograd(input);
  const Tensor t = backend::contiguous_nograd(target);
  const Tensor w = weight.defined() ? backend::contiguous_nograd(weight) : Tensor();
  const bool reduced = reduction != Reduction::None;
  Tensor out = make_empty(reduced ? Shape{} : geo.out_shape, x.dtype(), x.device());
  Tensor tw = reduced ? make_empty({}, backend::loss_acc_dtype(x.dtype()), x.device()) : Tensor();
  if (backend::nll_loss_forward_kernel(x.device().type, out, reduction, tw, x, t, w, loss::class_shape(geo), ignore_index))
    loss::throw_first_bad_target(kOp, t, geo.c, ignore_index);

  if (autograd::needs_grad(input)) {
    SavedVariable st(t, false);
    autograd::record("NllLossBackward0", {input}, {out},
                     [st, w, geo, ignore_index, reduction, tw, in_shape = x.sizes(), dtype = x.dtype(), device = x.device()](variable_list&& grads) {
                       const Tensor& g = grads[0];
                       const Tensor tt = st.unpack();
                       Tensor gi = make_empty(in_shape, dtype, device);
                       if (GradMode::is_enabled()) {
                         // grad = K * g with K the gradient for a unit g (Mean's 1 / total weight included).
                         {
                           NoGradGuard no_grad;
                           backend::LossGrad lg;  // one value, 1, for every sample
                           lg.g = loss::device_scalar(1.0, dtype, device);
                           if (reduction == Reduction::Mean) lg.divisor = tw;
                           backend::nll_loss_backward_kernel(device.type, gi, lg, tt, w, loss::class_shape(geo), ignore_index);
                         }
                         return variable_list{dp::mul(gi, reduction == Reduction::None ? loss::per_sample_to_input(g, geo) : g)};
                       }
                       backend::nll_loss_backward_kernel(device.type, gi, loss::loss_grad(g, reduction, dtype, 1.0, tw), tt, w,
                                                         loss::class_shape(geo), ignore_index);
                       return variable_list{gi};
                     });
  }
  return out;
}

}  // namespace dp
