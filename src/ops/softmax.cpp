// softmax and log_softmax over one dim, with autograd. The forward is one fused kernel (no
// temporaries); the backward uses a fused kernel too, except when the backward pass is itself
// recorded (create_graph), where it is written with dp ops on a recomputed result so that it can be
// differentiated again.
#include "core/kernels/reduce.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "ops/common.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

Tensor softmax_impl(const Tensor& a, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  ops::check_defined(name, a);
  kernels::check_cpu_tensor(name, a);
  DP_CHECK(is_floating_point(a.dtype()), DTypeError, name, "(): \"softmax_kernel_impl\" not implemented for '",
           kernels::torch_type_name(a.dtype()), "' (softmax needs a floating point input, got ", a.describe(), ")");
  const int64_t d = a.dim() == 0 ? (wrap_dim(dim, 0, name), 0) : wrap_dim(dim, a.dim(), name);
  Tensor x = kernels::contiguous_nograd(a);
  Tensor out = make_empty(a.sizes(), a.dtype(), a.device());
  kernels::softmax_kernel(out, x, d, log);
  if (autograd::needs_grad(a)) {
    SavedVariable sx(a, false), sy(out, true);
    autograd::record(log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", {a}, {out}, [sx, sy, d, log](variable_list&& grads) {
      const Tensor& g = grads[0];
      if (GradMode::is_enabled()) {
        Tensor xs = sx.unpack();
        if (log) {
          Tensor y = dp::log_softmax(xs, d);
          return variable_list{dp::sub(g, dp::mul(dp::exp(y), dp::sum(g, {d}, /*keepdim=*/true)))};
        }
        Tensor y = dp::softmax(xs, d);
        return variable_list{dp::mul(y, dp::sub(g, dp::sum(dp::mul(g, y), {d}, /*keepdim=*/true)))};
      }
      Tensor y = sy.unpack();
      Tensor gc = kernels::contiguous_nograd(kernels::convert_nograd(g, y.dtype()));
      Tensor gi = make_empty(y.sizes(), y.dtype(), y.device());
      kernels::softmax_backward_kernel(gi, gc, y, d, log);
      return variable_list{gi};
    });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_impl(a, dim, false); }

Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_impl(a, dim, true); }

}  // namespace dp
