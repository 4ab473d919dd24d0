// Element-wise losses: mse_loss, l1_loss, binary_cross_entropy, binary_cross_entropy_with_logits.
//
// Forward: one pass over the contiguous input and target computing each loss (times the weight)
// and either storing it (None) or summing it (Mean / Sum) in double lanes. weight and pos_weight
// broadcast to the input's shape: the iteration walks runs of the coalesced innermost dims in
// which each of them is either one value or contiguous, and the inner loops are compiled for
// those shapes so they vectorise.
// Backward: one fused pass writing d(loss)/d(input) and/or d(loss)/d(target). Under create_graph
// the same formulas are written with dp ops, so they can be differentiated again.
// The forward and backward passes are the kernels of backend/loss_kernels.h, one per device type
// (the CPU's in src/backend/cpu/loss_pointwise.cpp, CUDA's in src/backend/cuda/loss.cu); the sum of a
// reduced loss stays on the input's device and the backward reads the gradient there.
#include "backend/loss_kernels.h"
#include "dp/ops/elementwise.h"
#include "ops/loss_common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

using Kind = backend::PointwiseKind;

const char* node_name(Kind k) {
  switch (k) {
    case Kind::Mse:
      return "MseLossBackward0";
    case Kind::L1:
      return "L1LossBackward0";
    case Kind::Bce:
      return "BinaryCrossEntropyBackward0";
    case Kind::BceLogits:
      return "BinaryCrossEntropyWithLogitsBackward0";
  }
  return "?";
}

// ---- the differentiable (create_graph) backward, with dp ops ----

variable_list composite_backward(Kind k, const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw, Reduction red,
                                 int64_t numel, bool need_x, bool need_t) {
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
      if (need_x) gx = dp::div(dp::mul(dp::sub(x, t), gs), dp::clamp_min(dp::mul(dp::rsub(x, 1.0), x), static_cast<double>(backend::kBceEps)));
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

// ---- the op ----

void check_side(const char* op, const Tensor& input, const Tensor& side, const char* what) {
  if (!side.defined()) return;
  loss::check_companion(op, input, side, what);
  loss::check_constant(op, side, what);
  Shape b;
  try {
    b = broadcast_shapes(side.sizes(), input.sizes(), op);
  } catch (const ShapeError& e) {
    throw ShapeError(detail::str(op, ": ", what, " of shape ", side.size_str(), " does not broadcast to the input's shape ", input.size_str(), " (",
                                 e.what(), ")"));
  }
  DP_CHECK(b == input.sizes(), ShapeError, op, ": ", what, " of shape ", side.size_str(), " does not broadcast to the input's shape ",
           input.size_str(), " (the broadcast shape would be ", shape_str(b), ")");
}

Tensor pointwise_loss(Kind k, const Tensor& input, const Tensor& target, const Tensor& weight, const Tensor& pos_weight, Reduction red) {
  if (red == Reduction::Mean && MeanLossRecorder::current() != nullptr) {
    Tensor sum = pointwise_loss(k, input, target, weight, pos_weight, Reduction::Sum);  // checks the arguments
    return loss::record_mean(sum, loss::mean_count(static_cast<double>(input.numel()), input));
  }
  const char* op = backend::pointwise_loss_name(k);
  loss::check_input(op, input);
  ops::check_defined(op, target, "target");
  loss::check_companion(op, input, target, "target");
  if (input.sizes() != target.sizes()) {
    if (k == Kind::Bce)
      throw ShapeError(detail::str(op, ": Using a target size (", target.size_str(), ") that is different to the input size (", input.size_str(),
                                   ") is deprecated. Please ensure they have the same size."));
    if (k == Kind::BceLogits)
      throw ShapeError(detail::str(op, ": Target size (", target.size_str(), ") must be the same as input size (", input.size_str(), ")"));
    throw ShapeError(detail::str(op, ": target size (", target.size_str(), ") differs from input size (", input.size_str(),
                                 "); PyTorch would broadcast them with a warning (\"this will likely lead to incorrect results\"), "
                                 "dparallel requires the same size"));
  }
  check_side(op, input, weight, "weight");
  check_side(op, input, pos_weight, "pos_weight");

  const Tensor x = backend::contiguous_nograd(input);
  const Tensor t = backend::contiguous_nograd(target);
  const Tensor w = weight.defined() ? backend::contiguous_nograd(weight) : Tensor();
  const Tensor pw = pos_weight.defined() ? backend::contiguous_nograd(pos_weight) : Tensor();
  const int64_t numel = x.numel();

  const bool reduced = red != Reduction::None;
  Tensor out = make_empty(reduced ? Shape{} : x.sizes(), x.dtype(), x.device());
  const double scale = red == Reduction::Mean ? 1.0 / static_cast<double>(numel) : 1.0;  // Mean of nothing: 0 * inf = NaN
  const bool bad = backend::pointwise_loss_forward_kernel(x.device().type, k, out, reduced, scale, x, t, w, pw);
  DP_CHECK(!bad, ValueError, op, ": all elements of input should be between 0 and 1 (input ", input.describe(), ")");

  const bool need_x = autograd::needs_grad(input);
  const bool need_t = autograd::needs_grad(target);
  if (need_x || need_t) {
    SavedVariable sx(input, false), st(target, false);
    autograd::record(node_name(k), {input, target}, {out}, [k, sx, st, w, pw, red, numel, need_x, need_t](variable_list&& grads) -> variable_list {
      const Tensor& g = grads[0];
      Tensor xi = sx.unpack(), ti = st.unpack();
      if (GradMode::is_enabled()) return composite_backward(k, g, xi, ti, w, pw, red, numel, need_x, need_t);
      const Tensor xc = backend::contiguous_nograd(xi), tc = backend::contiguous_nograd(ti);
      Tensor gi = need_x ? make_empty(xc.sizes(), xc.dtype(), xc.device()) : Tensor();
      Tensor gt = need_t ? make_empty(xc.sizes(), xc.dtype(), xc.device()) : Tensor();
      const double scale = red == Reduction::Mean ? 1.0 / static_cast<double>(numel) : 1.0;
      backend::pointwise_loss_backward_kernel(xc.device().type, k, gi, gt, loss::loss_grad(g, red, xc.dtype(), scale), xc, tc, w, pw);
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
  if (autocast::detail::Cast ac{autocast::detail::Op::mse_loss, {&input, &target}}) return ac([&] { return dp::mse_loss(ac[0], ac[1], reduction); });
  return pointwise_loss(Kind::Mse, input, target, Tensor(), Tensor(), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast::detail::Cast ac{autocast::detail::Op::l1_loss, {&input, &target}}) return ac([&] { return dp::l1_loss(ac[0], ac[1], reduction); });
  return pointwise_loss(Kind::L1, input, target, Tensor(), Tensor(), reduction);
}

}  // namespace dp
