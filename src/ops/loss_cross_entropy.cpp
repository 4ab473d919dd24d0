// cross_entropy: log_softmax over the class dim fused with nll_loss (class-index targets) or with a
// dot against class probabilities, label smoothing included, in PyTorch's formulas:
//   indices:       loss_i = (1 - ls) * w[t] * (lse - x_t) + ls / C * sum_c w[c] * (lse - x_c)
//                  (0 for ignored samples), Mean divides by sum of w[t] over non-ignored samples;
//   probabilities: loss_i = sum_c w[c] * q_c * (lse - x_c), q = (1 - ls) * target + ls / C,
//                  Mean divides by the number of samples;
// with lse = log sum_c exp(x_c), computed as max + log(sum exp(x - max)). Only lse (and, for
// probabilities, sum_c w[c] q_c) per sample is kept for backward, not the log-probabilities:
//   d/dx_c = G * (S * p_c - coef_c), p = exp(x - lse),
//   indices:       coef_c = (1 - ls) * w[t] * [c == t] + ls / C * w[c], S = sum_c coef_c;
//   probabilities: coef_c = w[c] * q_c,                                 S = sum_c coef_c;
//   d/dtarget_c = G * (1 - ls) * w[c] * (lse - x_c)   (probabilities only).
// Layout: input seen as [N, C, S]. S == 1 (the usual [N, C]): per row, a max pass, an exp pass
// (vectorised, into an L1 scratch row) and, with smoothing, a weighted sum pass; S > 1: the same
// passes run down C over blocks of contiguous positions, vectorised across positions.
// Under create_graph the backward is the same formula with dp ops (softmax of the saved input).
// The passes are the kernels of backend/loss_kernels.h, one per device type (the CPU's in
// src/backend/cpu/loss_cross_entropy.cpp, CUDA's in src/backend/cuda/loss.cu); this file checks the
// arguments, calls them and records the backward, once for every device.
#include <algorithm>
#include <cmath>
#include "backend/loss_kernels.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "ops/loss_common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using loss::ClassGeometry;

constexpr const char* kOp = "cross_entropy";

struct Params {
  ClassGeometry geo;
  double eps = 0;  // label smoothing
  int64_t ignore = -100;
};
// ---------------------------------------------------------------- the backward under create_graph

// The constants of the class-index backward, grad = G * (B * softmax(x) - A): A (input-shaped) =
// coef, B (per sample) = its sum over classes; 0 for ignored samples. Float64 host tensors, built
// from the targets and weights read on the host (a copy from a CUDA device, in this rare path only).
void build_coefs(const Tensor& A, const Tensor& B, const Tensor& targets, const Tensor& weights, const Params& p) {
  const Tensor tt = backend::contiguous_nograd(backend::convert_nograd(targets.cpu(), kInt64));
  const Tensor w = weights.defined() ? backend::contiguous_nograd(backend::convert_nograd(weights.cpu(), kFloat64)) : Tensor();
  double* a = static_cast<double*>(A.data_ptr());
  double* b = static_cast<double*>(B.data_ptr());
  const double* wp = w.defined() ? static_cast<const double*>(w.data_ptr()) : nullptr;
  const int64_t* tg = static_cast<const int64_t*>(tt.data_ptr());
  const int64_t C = p.geo.c, S = p.geo.s;
  double wsum = static_cast<double>(C);
  if (wp) {
    wsum = 0;
    for (int64_t c = 0; c < C; ++c) wsum += wp[c];
  }
  const double keep = 1.0 - p.eps, per_class = p.eps / static_cast<double>(C);
  for (int64_t n = 0; n < p.geo.n; ++n)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = n * S + s;
      const int64_t tv = tg[i];
      const bool on = tv != p.ignore && tv >= 0 && tv < C;
      for (int64_t c = 0; c < C; ++c) a[(n * C + c) * S + s] = on ? per_class * (wp ? wp[c] : 1.0) : 0.0;
      if (!on) {
        b[i] = 0;
        continue;
      }
      const double wt = wp ? wp[tv] : 1.0;
      a[(n * C + tv) * S + s] += keep * wt;
      b[i] = keep * wt + per_class * wsum;
    }
}

// The class-index backward with dp ops (create_graph): differentiable again.
Tensor index_backward_composite(const Tensor& g, const Tensor& xi, const Tensor& tt, const Tensor& w, const Tensor& total_weight, const Params& p,
                                Reduction red) {
  Tensor A = make_empty(xi.sizes(), kFloat64, Device::cpu());
  Tensor B = make_empty(p.geo.out_shape, kFloat64, Device::cpu());
  build_coefs(A, B, tt, w, p);
  A = A.to(xi.device(), xi.dtype());
  B = B.to(xi.device(), xi.dtype());
  Tensor gb = red == Reduction::None   ? loss::per_sample_to_input(g, p.geo)
              : red == Reduction::Mean ? dp::div(g, backend::convert_nograd(total_weight, g.dtype()))
                                       : g;
  Tensor sm = dp::softmax(xi, p.geo.class_dim);
  return dp::mul(gb, dp::sub(dp::mul(loss::per_sample_to_input(B, p.geo), sm), A));
}

// The class-probability backward with dp ops (create_graph): differentiable again.
variable_list prob_backward_composite(const Tensor& g, const Tensor& xi, const Tensor& ti, const Tensor& w, const Params& p, Reduction red,
                                      double scale, bool need_x, bool need_t) {
  const int64_t cd = p.geo.class_dim;
  Tensor wb;
  if (w.defined()) {
    Shape ws(xi.dim(), 1);
    ws[cd] = p.geo.c;
    wb = w.reshape(ws);
  }
  Tensor gb = red == Reduction::None ? loss::per_sample_to_input(g, p.geo) : dp::mul(g, scale);
  Tensor gx, gt;
  if (need_x) {
    Tensor q = dp::add(dp::mul(ti, 1.0 - p.eps), p.eps / static_cast<double>(p.geo.c));
    Tensor wq = wb.defined() ? dp::mul(q, wb) : q;
    Tensor s = dp::sum(wq, {cd}, true);
    gx = dp::mul(gb, dp::sub(dp::mul(dp::softmax(xi, cd), s), wq));
  }
  if (need_t) {
    gt = dp::mul(dp::mul(gb, dp::log_softmax(xi, cd)), -(1.0 - p.eps));
    if (wb.defined()) gt = dp::mul(gt, wb);
  }
  return variable_list{gx, gt};
}

// ---------------------------------------------------------------- the op, class indices

// Per-sample log-sum-exps (and, for probabilities, sum_c w_c q_c) are saved in float32 (float64
// for float64 inputs); Mean's total weight stays on the input's device.
Tensor cross_entropy_index(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index, Reduction red, double eps) {
  loss::check_class_target_dtype(kOp, target);
  Params p;
  p.geo = loss::class_geometry(kOp, input, target);
  p.eps = eps;
  p.ignore = ignore_index;
  loss::check_class_weight(kOp, input, weight, p.geo.c);

  const Tensor x = backend::contiguous_nograd(input);
  const Tensor t = backend::contiguous_nograd(target);
  const Tensor w = weight.defined() ? backend::contiguous_nograd(weight) : Tensor();
  const bool reduced = red != Reduction::None;
  const DType acc = backend::loss_acc_dtype(x.dtype());
  Tensor out = make_empty(reduced ? Shape{} : p.geo.out_shape, x.dtype(), x.device());
  Tensor tw = reduced ? make_empty({}, acc, x.device()) : Tensor();
  Tensor lse = make_empty({p.geo.n * p.geo.s}, acc, x.device());
  if (backend::cross_entropy_index_forward_kernel(x.device().type, out, red, tw, lse, x, t, w, loss::class_shape(p.geo), p.ignore, p.eps))
    loss::throw_first_bad_target(kOp, t, p.geo.c, p.ignore);

  if (autograd::needs_grad(input)) {
    SavedVariable sx(input, false), st(t, false);
    autograd::record("CrossEntropyLossBackward0", {input}, {out}, [sx, st, w, lse, tw, p, red](variable_list&& grads) {
      const Tensor& g = grads[0];
      const Tensor xi = sx.unpack(), tt = st.unpack();
      if (GradMode::is_enabled()) return variable_list{index_backward_composite(g, xi, tt, w, tw, p, red)};
      const Tensor xc = backend::contiguous_nograd(xi);
      Tensor gi = make_empty(xc.sizes(), xc.dtype(), xc.device());
      backend::cross_entropy_index_backward_kernel(xc.device().type, gi, loss::loss_grad(g, red, xc.dtype(), 1.0, tw), xc, tt, w, lse,
                                                   loss::class_shape(p.geo), p.ignore, p.eps);
      return variable_list{gi};
    });
  }
  return out;
}

// ---------------------------------------------------------------- the op, class probabilities

Tensor cross_entropy_prob(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index, Reduction red, double eps) {
  DP_CHECK(is_floating_point(target.dtype()), DTypeError, kOp, ": Expected floating point type for target with class probabilities, got ",
           backend::torch_type_name(target.dtype()), " (target ", target.describe(), " has the input's shape)");
  loss::check_companion(kOp, input, target, "target");
  DP_CHECK(ignore_index < 0, ValueError, kOp, ": ignore_index is not supported for floating point target (got ignore_index ", ignore_index, ")");
  DP_CHECK(input.dim() >= 1, ShapeError, kOp, ": Expected 1 or more dimensions (got 0) (input ", input.describe(), ")");
  Params p;
  if (input.dim() == 1) {
    p.geo.c = input.size(0);
    p.geo.class_dim = 0;
  } else {
    p.geo.n = input.size(0);
    p.geo.c = input.size(1);
    p.geo.out_shape.push_back(p.geo.n);
    for (int64_t d = 2; d < input.dim(); ++d) {
      p.geo.out_shape.push_back(input.size(d));
      p.geo.s *= input.size(d);
    }
  }
  p.eps = eps;
  p.ignore = ignore_index;
  loss::check_class_weight(kOp, input, weight, p.geo.c);

  const Tensor x = backend::contiguous_nograd(input);
  const Tensor t = backend::contiguous_nograd(target);
  const Tensor w = weight.defined() ? backend::contiguous_nograd(weight) : Tensor();
  const int64_t samples = p.geo.n * p.geo.s;
  const DType acc = backend::loss_acc_dtype(x.dtype());
  const bool reduced = red != Reduction::None;
  Tensor out = make_empty(reduced ? Shape{} : p.geo.out_shape, x.dtype(), x.device());
  Tensor lse = make_empty({samples}, acc, x.device());
  Tensor rs = make_empty({samples}, acc, x.device());
  // PyTorch: the mean over samples, NaN for an empty input.
  const double scale = red != Reduction::Mean ? 1.0 : x.numel() == 0 ? std::nan("") : 1.0 / static_cast<double>(samples);
  backend::cross_entropy_prob_forward_kernel(x.device().type, out, reduced, scale, lse, rs, x, t, w, loss::class_shape(p.geo), p.eps);

  const bool need_x = autograd::needs_grad(input), need_t = autograd::needs_grad(target);
  if (!need_x && !need_t) return out;
  SavedVariable sx(input, false), st(target, false);
  autograd::record("CrossEntropyLossBackward0", {input, target}, {out}, [sx, st, w, lse, rs, p, red, samples, need_x, need_t](variable_list&& grads) {
    const Tensor& g = grads[0];
    const Tensor xi = sx.unpack(), ti = st.unpack();
    const double scale = red == Reduction::Mean ? 1.0 / static_cast<double>(samples) : 1.0;
    if (GradMode::is_enabled()) return prob_backward_composite(g, xi, ti, w, p, red, scale, need_x, need_t);
    const Tensor xc = backend::contiguous_nograd(xi), tc = backend::contiguous_nograd(ti);
    Tensor gi = need_x ? make_empty(xc.sizes(), xc.dtype(), xc.device()) : Tensor();
    Tensor gt = need_t ? make_empty(xc.sizes(), xc.dtype(), xc.device()) : Tensor();
    backend::cross_entropy_prob_backward_kernel(xc.device().type, gi, gt, loss::loss_grad(g, red, xc.dtype(), scale), xc, tc, w, lse, rs,
                                                loss::class_shape(p.geo), p.eps);
    return variable_list{gi, gt};
  });
  return out;
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index, Reduction reduction,
                     double label_smoothing) {
  if (autocast::detail::Cast ac{autocast::detail::Op::cross_entropy, {&input, &target, &weight}})
    return ac([&] { return dp::cross_entropy(ac[0], ac[1], ac[2], ignore_index, reduction, label_smoothing); });
  if (reduction == Reduction::Mean && MeanLossRecorder::current() != nullptr) {
    Tensor sum = dp::cross_entropy(input, target, weight, ignore_index, Reduction::Sum, label_smoothing);  // checks the arguments
    // Class probabilities (target shaped as the input) average over the samples, indices as nll_loss.
    if (target.sizes() == input.sizes())
      return loss::record_mean(
          sum, loss::mean_count(input.dim() <= 1 ? 1.0 : static_cast<double>(input.numel() / std::max<int64_t>(1, input.size(1))), input));
    return loss::record_mean(sum, loss::class_mean_count(input, target, weight, ignore_index));
  }
  loss::check_input(kOp, input);
  ops::check_defined(kOp, target, "target");
  ops::check_same_device(kOp, {&input, &target});
  DP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError, kOp,
           ": label_smoothing must be between 0.0 and 1.0. Got: ", label_smoothing);
  if (target.sizes() == input.sizes()) return cross_entropy_prob(input, target, weight, ignore_index, reduction, label_smoothing);
  return cross_entropy_index(input, target, weight, ignore_index, reduction, label_smoothing);
}

}  // namespace dp
