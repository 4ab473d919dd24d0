// batch_norm: per-channel statistics (training) or running statistics (eval), one fused
// normalise-and-affine pass, and one fused backward (grad input, weight and bias). The running
// buffers are updated in place on the tensors passed in (their TensorImpl and storage, version
// bumped), which is what nn::BatchNorm and DataParallel's buffer handling rely on. No global state:
// concurrent calls on different tensors are independent.
#include <cmath>
#include <vector>
#include "backend/capabilities.h"
#include "backend/norm_kernels.h"
#include "backend/copy_kernels.h"
#include "backend/norm_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/normalization.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/common.h"
#include "ops/reduction_helpers.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

// PyTorch's CPU rule for a bfloat16 input: the defined weight, bias, running_mean and running_var
// are all bfloat16, or all float32 (mixed precision: float32 parameters and statistics, as
// autocast and bfloat16 training keep them). Any other mix is refused naming every parameter.
void check_bfloat16_cpu_parameters(const Tensor& input, const std::pair<const Tensor*, const char*> (&params)[4]) {
  DType first = input.dtype();
  bool seen = false, ok = true;
  for (const auto& [t, name] : params) {
    if (!t->defined()) continue;
    if (!seen) first = t->dtype();
    seen = true;
    ok = ok && t->dtype() == first && (first == kBFloat16 || first == kFloat32);
  }
  if (ok) return;
  std::string got;
  for (const auto& [t, name] : params)
    if (t->defined()) got += std::string(got.empty() ? "" : ", ") + name + " " + dtype_name(t->dtype());
  throw DTypeError(detail::str("batch_norm: a bfloat16 input on the CPU (", input.size_str(),
                               ") takes running_mean, running_var, weight and bias all bfloat16 or all float32 (those defined), got ", got));
}

void check_batch_norm_inputs(const Tensor& input, const Tensor& rm, const Tensor& rv, const Tensor& w, const Tensor& b, bool training) {
  const char* op = "batch_norm";
  ops::check_defined(op, input);
  if (!backend::capabilities(input.device()).kernels) ops::check_cpu_tensor(op, input);
  ops::check_same_device(op, {&input, &rm, &rv, &w, &b});
  DP_CHECK(input.dim() >= 2, ShapeError, "batch_norm: expected an input of at least 2 dimensions [N, C, *], got ", input.describe());
  // bfloat16 on the CPU (float64 statistics, src/backend/cpu/norm_kernels.cpp) and on CUDA
  // devices (src/backend/cuda/norm_pool.cu: float32 statistics); float16 on CUDA devices only.
  DP_CHECK(
      input.dtype() == kFloat32 || input.dtype() == kFloat64 || input.dtype() == kBFloat16 || backend::half_nn_dtype(input.device(), input.dtype()),
      DTypeError, "batch_norm: expected an input of dtype float32, float64 or bfloat16 (float16 on CUDA devices only), got ", input.describe());
  const int64_t C = input.size(1);
  const std::pair<const Tensor*, const char*> per_channel[] = {{&rm, "running_mean"}, {&rv, "running_var"}, {&w, "weight"}, {&b, "bias"}};
  for (const auto& [t, name] : per_channel) {
    if (!t->defined()) continue;
    DP_CHECK(t->numel() == C, ShapeError, "batch_norm: ", name, " should contain ", C, " elements not ", t->numel(), " (input ", input.size_str(),
             ")");
  }
  if (input.dtype() == kBFloat16 && input.is_cpu()) {
    check_bfloat16_cpu_parameters(input, per_channel);
  } else {
    for (const Tensor* t : {&w, &b})
      DP_CHECK(!t->defined() || t->dtype() == input.dtype(), DTypeError, "batch_norm: expected ", t == &w ? "weight" : "bias",
               " to have the input's dtype ", dtype_name(input.dtype()), ", got ", t->describe());
  }
  for (const Tensor* t : {&rm, &rv})
    DP_CHECK(!t->defined() || is_floating_point(t->dtype()), DTypeError, "batch_norm: expected ", t == &rm ? "running_mean" : "running_var",
             " to be a floating point tensor, got ", t->describe());
  DP_CHECK(rm.defined() == rv.defined(), ValueError, "batch_norm: running_mean and running_var must both be defined or both undefined");
  if (!training) {
    DP_CHECK(rm.defined(), ValueError, "batch_norm: running_mean must be defined in evaluation mode");
    DP_CHECK(rv.defined(), ValueError, "batch_norm: running_var must be defined in evaluation mode");
  } else {
    // PyTorch's F.batch_norm check (_verify_batch_size): one value per channel has no variance.
    int64_t count = input.size(0);
    for (int64_t d = 2; d < input.dim(); ++d) count *= input.size(d);
    if (count == 1) {
      std::string sizes = input.size_str();
      throw ValueError("Expected more than 1 value per channel when training, got input size torch.Size(" + sizes + ")");
    }
  }
}

// running = (1 - momentum) * running + momentum * stat[c] * factor, in place on `running` itself
// (through a contiguous copy written back when it is not contiguous).
void update_running(const Tensor& running, const Tensor& stat, double factor, double momentum) {
  Tensor dst = running.is_contiguous() ? running : backend::contiguous_nograd(running);
  backend::batch_norm_update_running_kernel(running.device().type, dst, stat, factor, momentum);
  if (!dst.is_same(running)) backend::copy_kernel(backend::copy_device_type(running, dst), running, dst);
  running.bump_version();
}

// A fresh [C] float64 copy of a per-channel tensor (never an alias: the copy is saved for the
// backward, and the running buffers may change before it runs).
Tensor channel_f64(const Tensor& t) {
  Tensor out = make_empty({t.numel()}, kFloat64, t.device());
  backend::copy_kernel(backend::copy_device_type(out, (backend::restride_nograd(backend::contiguous_nograd(t), {t.numel()}, {1}))), out,
                       backend::restride_nograd(backend::contiguous_nograd(t), {t.numel()}, {1}));
  return out;
}

// The backward in dp ops (differentiable), for create_graph. A 16-bit input's backward runs in
// float32 (the fused kernel sums in float64; 16-bit intermediate ops would round every step) and
// each gradient is converted back to its tensor's dtype, on the graph.
variable_list batch_norm_backward_ops(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& invstd, bool training,
                                      double eps, bool gx, bool gw, bool gb, const Shape& b_shape, DType b_dtype) {
  if (x.dtype() == kFloat16 || x.dtype() == kBFloat16) {
    auto f32 = [](const Tensor& t) { return t.defined() && t.dtype() != kFloat32 ? t.to(kFloat32) : t; };
    auto back = [](const Tensor& t, DType dt) { return t.defined() && t.dtype() != dt ? t.to(dt) : t; };
    variable_list r = batch_norm_backward_ops(f32(g), f32(x), f32(w), mean, invstd, training, eps, gx, gw, gb, b_shape, kFloat32);
    return {back(r[0], x.dtype()), w.defined() ? back(r[1], w.dtype()) : r[1], back(r[2], b_dtype)};
  }
  const int64_t C = x.size(1);
  std::vector<int64_t> dims{0};
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = C;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor xhat, rs;
  if (training) {
    Tensor mu = dp::mean(x, dims, true);
    rs = dp::rsqrt(dp::add(dp::var(x, dims, 0, true), eps));
    xhat = dp::mul(dp::sub(x, mu), rs);
  } else {
    rs = dp::reshape(backend::convert_nograd(invstd, x.dtype()), bshape);
    xhat = dp::mul(dp::sub(x, dp::reshape(backend::convert_nograd(mean, x.dtype()), bshape)), rs);
  }
  Tensor dx, dw, db;
  if (gx) {
    Tensor wb = w.defined() ? dp::reshape(w, bshape) : Tensor();
    Tensor gwt = wb.defined() ? dp::mul(g, wb) : g;
    if (training) {
      Tensor inner = dp::sub(dp::sub(gwt, dp::mean(gwt, dims, true)), dp::mul(xhat, dp::mean(dp::mul(gwt, xhat), dims, true)));
      dx = dp::mul(rs, inner);
    } else {
      dx = dp::mul(gwt, rs);
    }
  }
  if (gw) dw = dp::reshape(dp::sum(dp::mul(g, xhat), dims), w.sizes());
  if (gb) db = dp::reshape(dp::sum(g, dims), b_shape);
  return {dx, dw, db};
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight, const Tensor& bias, bool training,
                  double momentum, double eps) {
  check_batch_norm_inputs(input, running_mean, running_var, weight, bias, training);
  const int64_t B = input.size(0), C = input.size(1);
  int64_t L = 1;
  for (int64_t d = 2; d < input.dim(); ++d) L *= input.size(d);
  const int64_t count = B * L;
  Tensor x = backend::contiguous_nograd(input);
  // Kernels read per-channel tensors as C contiguous values, whatever their shape.
  Tensor w = weight.defined() ? backend::contiguous_nograd(weight) : Tensor();
  Tensor b = bias.defined() ? backend::contiguous_nograd(bias) : Tensor();

  // Per-channel mean and 1 / sqrt(var + eps) used to normalise, float64 [C].
  Tensor mean, invstd;
  if (training) {
    mean = make_empty({C}, kFloat64, input.device());
    Tensor var = make_empty({C}, kFloat64, input.device());
    if (count > 0) {
      backend::batch_norm_stats_kernel(x.device().type, x, B, C, L, mean, var);
      if (running_mean.defined()) {
        update_running(running_mean, mean, 1.0, momentum);
        update_running(running_var, var, static_cast<double>(count) / static_cast<double>(count - 1), momentum);
      }
    } else {
      // An empty batch: nothing to normalise, no statistics, running stats untouched.
      backend::fill_kernel(mean.device().type, mean, 0.0);
      backend::fill_kernel(var.device().type, var, 0.0);
    }
    invstd = var;  // reuse: var -> 1 / sqrt(var + eps)
  } else {
    mean = channel_f64(running_mean);
    invstd = channel_f64(running_var);
  }
  backend::batch_norm_invstd_kernel(input.device().type, invstd, eps, training && count == 0);
  Tensor out = make_empty(input.sizes(), input.dtype(), input.device());
  if (count > 0) backend::batch_norm_apply_kernel(x.device().type, x, mean, invstd, w, b, B, C, L, out);

  const bool gx = autograd::needs_grad(input), gw = autograd::needs_grad(weight), gb = autograd::needs_grad(bias);
  if (gx || gw || gb) {
    SavedVariable sx(input, false);
    SavedVariable sw = weight.defined() ? SavedVariable(weight, false) : SavedVariable();
    const Shape w_shape = weight.defined() ? weight.sizes() : Shape{};
    const Shape b_shape = bias.defined() ? bias.sizes() : Shape{};
    // The weight and bias gradients take their tensors' dtypes (float32 for a bfloat16 input with
    // float32 parameters), the input gradient the input's.
    const DType w_dtype = weight.defined() ? weight.dtype() : input.dtype(), b_dtype = bias.defined() ? bias.dtype() : input.dtype();
    autograd::record("NativeBatchNormBackward0", {input, weight, bias}, {out},
                     [sx, sw, mean, invstd, training, eps, gx, gw, gb, B, C, L, w_shape, b_shape, w_dtype, b_dtype](variable_list&& grads) {
                       const Tensor& g = grads[0];
                       Tensor x = sx.unpack();
                       Tensor w = sw.defined() ? sw.unpack() : Tensor();
                       if (GradMode::is_enabled() && B * L > 0)
                         return batch_norm_backward_ops(g, x, w, mean, invstd, training, eps, gx, gw, gb, b_shape, b_dtype);
                       Tensor dy = backend::contiguous_nograd(backend::convert_nograd(g, x.dtype()));
                       Tensor dx = gx ? make_empty(x.sizes(), x.dtype(), x.device()) : Tensor();
                       Tensor dw = gw ? make_empty(w_shape, w_dtype, x.device()) : Tensor();
                       Tensor db = gb ? make_empty(b_shape, b_dtype, x.device()) : Tensor();
                       Tensor wc = w.defined() ? backend::contiguous_nograd(w) : Tensor();
                       backend::batch_norm_backward_kernel((backend::contiguous_nograd(x)).device().type, dy, backend::contiguous_nograd(x), mean,
                                                           invstd, wc, training, B, C, L, dx, dw, db);
                       return variable_list{dx, dw, db};
                     });
  }
  return out;
}

}  // namespace dp
