// softmax and log_softmax over one dim, with autograd. The forward is one fused kernel (no
// temporaries) and, as in PyTorch, only the result is saved for backward. The backward is a fused
// kernel too. When the backward is itself recorded (create_graph), its result is given a node of
// its own ("SoftmaxBackwardDataBackward0") whose edges lead to the incoming gradient and to the
// softmax input, so second derivatives flow through the saved result without keeping the input.
#include "dp/core/pooled.h"
#include "backend/reduce_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "ops/common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::Node;
using autograd::SavedVariable;
using autograd::variable_list;

// The fused backward: d softmax(x) / dx applied to g, given y = softmax(x) (or log_softmax(x)).
Tensor softmax_backward_data(const Tensor& g, const Tensor& y, int64_t dim, bool log) {
  Tensor gc = backend::contiguous_nograd(backend::convert_nograd(g, y.dtype()));
  Tensor gi = make_empty(y.sizes(), y.dtype(), y.device());
  backend::softmax_backward_kernel(gi.device().type, gi, gc, y, dim, log);
  return gi;
}

// Gradients of gi = softmax_backward_data(g, y) w.r.t. g and w.r.t. the softmax input x, given the
// gradient gg of gi (dp ops; y and g are constants here).
//   softmax:     gi = y (g - <g, y>)          d/dg: y (gg - <gg, y>)
//                                              d/dy: gg (g - <g, y>) - g <gg, y>
//   log_softmax: gi = g - p <g, 1>, p = e^y   d/dg: gg - <gg, p>
//                                              d/dy: -gg p <g, 1>
// and d/dx = (the softmax / log_softmax backward of d/dy).
variable_list softmax_double_backward(const Tensor& gg, const Tensor& g, const Tensor& y, int64_t d, bool log) {
  Tensor grad_g, grad_y;
  if (log) {
    Tensor p = dp::exp(y);
    grad_g = dp::sub(gg, dp::sum(dp::mul(gg, p), {d}, true));
    grad_y = dp::neg(dp::mul(dp::mul(gg, p), dp::sum(g, {d}, true)));
    Tensor grad_x = dp::sub(grad_y, dp::mul(p, dp::sum(grad_y, {d}, true)));
    return {grad_g, grad_x};
  }
  Tensor s_gg = dp::sum(dp::mul(gg, y), {d}, true);
  grad_g = dp::mul(y, dp::sub(gg, s_gg));
  grad_y = dp::sub(dp::mul(gg, dp::sub(g, dp::sum(dp::mul(g, y), {d}, true))), dp::mul(g, s_gg));
  Tensor grad_x = dp::mul(y, dp::sub(grad_y, dp::sum(dp::mul(grad_y, y), {d}, true)));
  return {grad_g, grad_x};
}

Tensor softmax_impl(const Tensor& a, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  ops::check_defined(name, a);
  DP_CHECK(is_floating_point(a.dtype()), DTypeError, name, "(): \"softmax_kernel_impl\" not implemented for '", backend::torch_type_name(a.dtype()),
           "' (softmax needs a floating point input, got ", a.describe(), ")");
  const int64_t d = a.dim() == 0 ? (wrap_dim(dim, 0, name), 0) : wrap_dim(dim, a.dim(), name);
  Tensor x = backend::contiguous_nograd(a);
  Tensor out = make_empty(a.sizes(), a.dtype(), a.device());
  backend::softmax_kernel(out.device().type, out, x, d, log);
  if (autograd::needs_grad(a)) {
    SavedVariable sy(out, true);
    // The node itself, for its edge to the input (filled in right after record()).
    auto self = std::make_shared<std::weak_ptr<Node>>();
    std::shared_ptr<Node> node =
        autograd::record(log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", {a}, {out}, [sy, d, log, self](variable_list&& grads) {
          const Tensor& g = grads[0];
          Tensor y = sy.unpack();
          if (!GradMode::is_enabled()) return variable_list{softmax_backward_data(g, y, d, log)};
          // create_graph: compute gi without history, then give it a node of its own.
          Tensor gi;
          {
            NoGradGuard no_grad;
            gi = softmax_backward_data(g, y, d, log);
          }
          std::shared_ptr<Node> me = self->lock();
          DP_CHECK(me != nullptr, AutogradError, "softmax backward: its node is gone");
          Tensor gd = g.detach();
          auto bb = ::dp::detail::make_pooled<autograd::FunctionNode>(
              log ? "LogSoftmaxBackwardDataBackward0" : "SoftmaxBackwardDataBackward0", [sy, gd, d, log](variable_list&& gg) {
                DP_CHECK(!GradMode::is_enabled(), NotImplementedError, log ? "log_softmax" : "softmax",
                         ": derivatives of order three and higher are not supported");
                return softmax_double_backward(gg[0], gd, sy.unpack(), d, log);
              });
          bb->add_next_edge(autograd::gradient_edge(g));
          bb->add_next_edge(me->next_edges()[0]);
          autograd::set_history({gi}, bb);
          return variable_list{gi};
        });
    *self = node;
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) {
  if (autocast::detail::Cast ac{autocast::detail::Op::softmax, {&a}}) return ac([&] { return dp::softmax(ac[0], dim); });
  return softmax_impl(a, dim, false);
}

Tensor log_softmax(const Tensor& a, int64_t dim) {
  if (autocast::detail::Cast ac{autocast::detail::Op::log_softmax, {&a}}) return ac([&] { return dp::log_softmax(ac[0], dim); });
  return softmax_impl(a, dim, true);
}

}  // namespace dp
