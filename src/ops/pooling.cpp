// max_pool2d, avg_pool2d, adaptive_avg_pool2d, with autograd.
//
// Each pooling is linear in its input once the window choice is fixed (max pooling: the saved
// argmax indices), so each backward is a linear map P^T whose own derivative is P again:
//   max:      backward scatters g to the indices;   its backward gathers gg at the indices
//   avg:      backward spreads g / divisor;         its backward is avg_pool2d(gg)
//   adaptive: backward spreads g / window size;     its backward is adaptive_avg_pool2d(gg)
// The backward maps are recorded as autograd nodes themselves, so pooling is differentiable to any
// order. Argument checks and output sizes are PyTorch's (pool2d_shape_check, pooling_output_shape).
#include "dp/ops/pooling.h"

#include "backend/capabilities.h"
#include "backend/pool_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/index.h"
#include "dp/ops/shape.h"
#include "ops/common.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using backend::Pool2dGeometry;

std::pair<int64_t, int64_t> pair_of(IntArrayRef v) { return v.size() == 1 ? std::pair{v[0], v[0]} : std::pair{v[0], v[1]}; }

// float32, float64 and bfloat16 on the CPU or a CUDA device, float16 on a CUDA device only (the
// CUDA kernels, src/backend/cuda/norm_pool.cu, take both 16-bit types; PyTorch's CPU pooling takes
// bfloat16 but not float16).
bool supported_dtype(const Tensor& t) {
  return t.dtype() == kFloat32 || t.dtype() == kFloat64 || t.dtype() == kBFloat16 || backend::half_nn_dtype(t.device(), t.dtype());
}

void check_input(const char* op, const Tensor& x) {
  ops::check_defined(op, x);
  DP_CHECK(backend::capabilities(x.device()).kernels, NotImplementedError, op, ": not implemented for ", x.device().str(), " tensors");
  DP_CHECK(supported_dtype(x), DTypeError, op, ": expected a float32, float64 or bfloat16 input, but got ", dtype_name(x.dtype()), " ", x.size_str(),
           " on ", x.device().str(), " (float16 is supported on CUDA devices only)");
  bool ok = x.dim() == 3 || x.dim() == 4;
  for (int64_t d = x.dim() == 4 ? 1 : 0; ok && d < x.dim(); ++d) ok = x.size(d) > 0;
  DP_CHECK(ok, ShapeError, op, ": Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got: ", x.size_str());
}

// PyTorch's pooling_output_shape: floor or ceil division, and with ceil_mode the last window
// must start inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  const int64_t q = num >= 0 ? num / stride : -((-num + stride - 1) / stride);  // rounds toward -inf
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The geometry of a (max or avg) pooling, after PyTorch's checks.
Pool2dGeometry pool_geometry(const char* op, const Tensor& x, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                             bool ceil_mode) {
  DP_CHECK(kernel_size.size() == 1 || kernel_size.size() == 2, ValueError, op,
           ": kernel_size must either be a single int, or a tuple of two ints, but got ", shape_str(kernel_size));
  DP_CHECK(stride.size() <= 2, ValueError, op, ": stride must either be omitted, a single int, or a tuple of two ints, but got ", shape_str(stride));
  DP_CHECK(padding.size() == 1 || padding.size() == 2, ValueError, op, ": padding must either be a single int, or a tuple of two ints, but got ",
           shape_str(padding));
  DP_CHECK(dilation.size() == 1 || dilation.size() == 2, ValueError, op, ": dilation must be either a single int, or a tuple of two ints, but got ",
           shape_str(dilation));
  auto [kh, kw] = pair_of(kernel_size);
  auto [sh, sw] = stride.empty() ? std::pair{kh, kw} : pair_of(stride);
  auto [ph, pw] = pair_of(padding);
  auto [dh, dw] = pair_of(dilation);
  check_input(op, x);
  DP_CHECK(kh > 0 && kw > 0, ValueError, op, ": kernel size should be greater than zero, but got kH: ", kh, " kW: ", kw);
  DP_CHECK(sh > 0 && sw > 0, ValueError, op, ": stride should be greater than zero, but got dH: ", sh, " dW: ", sw);
  DP_CHECK(dh > 0 && dw > 0, ValueError, op, ": dilation should be greater than zero, but got dilationH: ", dh, " dilationW: ", dw);
  DP_CHECK(ph >= 0 && pw >= 0, ValueError, op, ": pad must be non-negative, but got padH: ", ph, " padW: ", pw);
  DP_CHECK(ph <= kh / 2 && pw <= kw / 2, ValueError, op, ": pad should be at most half of kernel size, but got pad=", ph > kh / 2 ? ph : pw,
           " and kernel_size=", ph > kh / 2 ? kh : kw, " (padding ", shape_str(padding), ", kernel_size ", shape_str(kernel_size), ")");
  const int64_t H = x.size(-2), W = x.size(-1), C = x.size(-3);
  Pool2dGeometry g{};
  g.planes = x.dim() == 4 ? x.size(0) * C : C;
  g.H = H;
  g.W = W;
  g.OH = pooled_size(H, kh, ph, sh, dh, ceil_mode);
  g.OW = pooled_size(W, kw, pw, sw, dw, ceil_mode);
  DP_CHECK(g.OH >= 1 && g.OW >= 1, ShapeError, op, ": Given input size: (", C, "x", H, "x", W, "). Calculated output size: (", C, "x", g.OH, "x",
           g.OW, "). Output size is too small");
  g.kh = kh;
  g.kw = kw;
  g.sh = sh;
  g.sw = sw;
  g.ph = ph;
  g.pw = pw;
  g.dh = dh;
  g.dw = dw;
  return g;
}

Shape out_shape(const Tensor& x, const Pool2dGeometry& g) {
  Shape s = x.sizes();
  s[s.size() - 2] = g.OH;
  s[s.size() - 1] = g.OW;
  return s;
}

// ---- max ----

Tensor max_pool_backward(const Tensor& go, const Tensor& indices, const Shape& in_size, const Pool2dGeometry& g);

// grad_output gathered at the indices: the derivative of max_pool_backward w.r.t. its grad_output.
Tensor gather_at(const Tensor& gg, const Tensor& indices, const Pool2dGeometry& g) {
  Tensor flat = dp::reshape(gg, {g.planes, g.H * g.W});
  return dp::reshape(dp::gather(flat, 1, dp::reshape(indices, {g.planes, g.OH * g.OW})), indices.sizes());
}

Tensor max_pool_backward(const Tensor& go, const Tensor& indices, const Shape& in_size, const Pool2dGeometry& g) {
  Tensor goc = backend::contiguous_nograd(go);
  Tensor gx = make_empty(in_size, go.dtype(), go.device());
  backend::max_pool2d_backward_kernel(gx.device().type, gx, goc, indices, g);
  if (autograd::needs_grad(go)) {
    autograd::record("MaxPool2DWithIndicesBackwardBackward0", {go}, {gx},
                     [indices, g](variable_list&& grads) { return variable_list{gather_at(grads[0], indices, g)}; });
  }
  return gx;
}

std::pair<Tensor, Tensor> max_pool_impl(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                                        bool ceil_mode) {
  const char* op = "max_pool2d";
  const Pool2dGeometry g = pool_geometry(op, input, kernel_size, stride, padding, dilation, ceil_mode);
  const Shape os = out_shape(input, g);
  Tensor out = make_empty(os, input.dtype(), input.device());
  Tensor indices = make_empty(os, kInt64, input.device());
  backend::max_pool2d_kernel(out.device().type, out, indices, backend::contiguous_nograd(input), g);
  if (autograd::needs_grad(input)) {
    const Shape in_size = input.sizes();
    const DType dt = input.dtype();
    autograd::record("MaxPool2DWithIndicesBackward0", {input}, {out}, [indices, in_size, dt, g](variable_list&& grads) {
      Tensor go = grads[0].dtype() == dt ? grads[0] : grads[0].to(dt);
      return variable_list{max_pool_backward(go, indices, in_size, g)};
    });
  }
  return {out, indices};
}

// ---- avg ----

struct AvgOptions {
  bool count_include_pad;
  std::optional<int64_t> divisor_override;
};

Tensor avg_pool_forward(const Tensor& x, const Pool2dGeometry& g, const AvgOptions& o);

Tensor avg_pool_backward(const Tensor& go, const Shape& in_size, const Pool2dGeometry& g, const AvgOptions& o) {
  Tensor gx = make_empty(in_size, go.dtype(), go.device());
  backend::avg_pool2d_backward_kernel(gx.device().type, gx, backend::contiguous_nograd(go), g, o.count_include_pad, o.divisor_override);
  if (autograd::needs_grad(go)) {
    autograd::record("AvgPool2DBackwardBackward0", {go}, {gx},
                     [g, o](variable_list&& grads) { return variable_list{avg_pool_forward(grads[0], g, o)}; });
  }
  return gx;
}

Tensor avg_pool_forward(const Tensor& x, const Pool2dGeometry& g, const AvgOptions& o) {
  Tensor out = make_empty(out_shape(x, g), x.dtype(), x.device());
  backend::avg_pool2d_kernel(out.device().type, out, backend::contiguous_nograd(x), g, o.count_include_pad, o.divisor_override);
  if (autograd::needs_grad(x)) {
    const Shape in_size = x.sizes();
    const DType dt = x.dtype();
    autograd::record("AvgPool2DBackward0", {x}, {out}, [in_size, dt, g, o](variable_list&& grads) {
      Tensor go = grads[0].dtype() == dt ? grads[0] : grads[0].to(dt);
      return variable_list{avg_pool_backward(go, in_size, g, o)};
    });
  }
  return out;
}

// ---- adaptive avg ----

Tensor adaptive_forward(const Tensor& x, const Pool2dGeometry& g);

Tensor adaptive_backward(const Tensor& go, const Shape& in_size, const Pool2dGeometry& g) {
  Tensor gx = make_empty(in_size, go.dtype(), go.device());
  backend::adaptive_avg_pool2d_backward_kernel(gx.device().type, gx, backend::contiguous_nograd(go), g);
  if (autograd::needs_grad(go)) {
    autograd::record("AdaptiveAvgPool2DBackwardBackward0", {go}, {gx},
                     [g](variable_list&& grads) { return variable_list{adaptive_forward(grads[0], g)}; });
  }
  return gx;
}

Tensor adaptive_forward(const Tensor& x, const Pool2dGeometry& g) {
  Tensor out = make_empty(out_shape(x, g), x.dtype(), x.device());
  backend::adaptive_avg_pool2d_kernel(out.device().type, out, backend::contiguous_nograd(x), g);
  if (autograd::needs_grad(x)) {
    const Shape in_size = x.sizes();
    const DType dt = x.dtype();
    autograd::record("AdaptiveAvgPool2DBackward0", {x}, {out}, [in_size, dt, g](variable_list&& grads) {
      Tensor go = grads[0].dtype() == dt ? grads[0] : grads[0].to(dt);
      return variable_list{adaptive_backward(go, in_size, g)};
    });
  }
  return out;
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                                                  IntArrayRef dilation, bool ceil_mode) {
  return max_pool_impl(input, kernel_size, stride, padding, dilation, ceil_mode);
}

Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  return max_pool_impl(input, kernel_size, stride, padding, dilation, ceil_mode).first;
}

Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  DP_CHECK(!divisor_override || *divisor_override != 0, ValueError, op, ": divisor must be not zero");
  const Pool2dGeometry g = pool_geometry(op, input, kernel_size, stride, padding, {1, 1}, ceil_mode);
  return avg_pool_forward(input, g, AvgOptions{count_include_pad, divisor_override});
}

Tensor adaptive_avg_pool2d(const Tensor& input, IntArrayRef output_size) {
  const char* op = "adaptive_avg_pool2d";
  DP_CHECK(output_size.size() == 1 || output_size.size() == 2, ValueError, op, ": output_size must be 2 (or a single int), but got ",
           shape_str(output_size));
  auto [oh, ow] = pair_of(output_size);
  DP_CHECK(oh >= 0 && ow >= 0, ValueError, op, ": elements of output_size must be greater than or equal to 0 but received ", shape_str(output_size));
  ops::check_defined(op, input);
  DP_CHECK(backend::capabilities(input.device()).kernels, NotImplementedError, op, ": not implemented for ", input.device().str(), " tensors");
  DP_CHECK(supported_dtype(input), DTypeError, op, ": expected a float32, float64 or bfloat16 input, but got ", dtype_name(input.dtype()), " ",
           input.size_str(), " on ", input.device().str(), " (float16 is supported on CUDA devices only)");
  DP_CHECK(input.dim() == 3 || input.dim() == 4, ShapeError, op, "(): Expected 3D or 4D tensor, but got ", input.size_str());
  for (int64_t d = input.dim() - 3; d < input.dim(); ++d)
    DP_CHECK(input.size(d) > 0, ShapeError, op, "(): Expected input to have non-zero size for non-batch dimensions, but input has sizes ",
             input.size_str(), " with dimension ", d, " being empty");
  Pool2dGeometry g{};
  g.planes = input.dim() == 4 ? input.size(0) * input.size(1) : input.size(0);
  g.H = input.size(-2);
  g.W = input.size(-1);
  g.OH = oh;
  g.OW = ow;
  return adaptive_forward(input, g);
}

}  // namespace dp
