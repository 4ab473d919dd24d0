// conv2d and its two backward halves, with autograd.
//
// Three bilinear maps carry everything (kernels in src/backend/cpu/conv_kernels.cpp):
//   F(x, w)   = conv2d(x, w)                    (node ConvolutionBackward0, bias added here too)
//   Gx(go, w) = dF/dx applied to go             (conv2d_backward_input)
//   Gw(x, go) = dF/dw applied to go             (conv2d_backward_weight)
// Each one's derivatives are the other two (for an upstream gradient gg):
//   F:  dx = Gx(g, w),      dw = Gw(x, g)
//   Gx: dgo = F(gg, w),     dw = Gw(gg, go)
//   Gw: dx = Gx(go, gg),    dgo = F(x, gg)
// so recording each with autograd makes conv2d differentiable to any order. The first-order
// backward (grad mode off, the training case) runs one fused kernel instead: per image, the input
// and weight gradients are computed while grad_output is in cache, and only the gradients of the
// inputs that required grad at forward time are computed.
#include "dp/ops/conv.h"

#include <utility>

#include "backend/capabilities.h"
#include "backend/conv_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;
using backend::Conv2dGeometry;

struct ConvParams {
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

// PyTorch's C++ type name, as its messages print dtypes ("Input type (float) and bias type (double)").
const char* cpp_name(DType t) {
  switch (t) {
    case kFloat32:
      return "float";
    case kFloat64:
      return "double";
    case kFloat16:
      return "c10::Half";
    case kBFloat16:
      return "c10::BFloat16";
    case kInt64:
      return "long int";
    case kInt32:
      return "int";
    case kUInt8:
      return "unsigned char";
    case kBool:
      return "bool";
  }
  return "?";
}

std::pair<int64_t, int64_t> expand_pair(const char* op, const char* what, IntArrayRef v) {
  DP_CHECK(v.size() == 1 || v.size() == 2, ValueError, op, ": expected ", what,
           " to be a single integer value or a list of 2 values to match the convolution dimensions, but got ", what, "=", shape_str(v));
  return v.size() == 1 ? std::pair{v[0], v[0]} : std::pair{v[0], v[1]};
}

ConvParams parse_params(const char* op, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  auto [sh, sw] = expand_pair(op, "stride", stride);
  auto [ph, pw] = expand_pair(op, "padding", padding);
  auto [dh, dw] = expand_pair(op, "dilation", dilation);
  DP_CHECK(sh > 0 && sw > 0, ValueError, op, ": non-positive stride is not supported (stride=", shape_str(stride), ")");
  DP_CHECK(ph >= 0 && pw >= 0, ValueError, op, ": negative padding is not supported (padding=", shape_str(padding), ")");
  DP_CHECK(dh > 0 && dw > 0, ValueError, op, ": dilation should be greater than zero, but got ", shape_str(dilation));
  DP_CHECK(groups > 0, ValueError, op, ": non-positive groups is not supported (groups=", groups, ")");
  return {sh, sw, ph, pw, dh, dw, groups};
}

// Checks a 4-D input size against a weight size and computes the output geometry.
Conv2dGeometry make_geometry(const char* op, IntArrayRef in, IntArrayRef w, const ConvParams& p) {
  DP_CHECK(w.size() == 4, ShapeError, op,
           ": expected weight to be 4-dimensional [out_channels, in_channels / groups, kH, kW], but got weight of size ", shape_str(w));
  DP_CHECK(in.size() == 4, ShapeError, op, ": expected a 4-D input [N, C, H, W], but got input of size ", shape_str(in));
  DP_CHECK(w[0] % p.groups == 0, ShapeError, op, ": Given groups=", p.groups, ", expected weight to be divisible by ", p.groups,
           " at dimension 0, but got weight of size ", shape_str(w), " instead");
  DP_CHECK(in[1] == w[1] * p.groups, ShapeError, op, ": Given groups=", p.groups, ", weight of size ", shape_str(w), ", expected input",
           shape_str(in), " to have ", w[1] * p.groups, " channels, but got ", in[1], " channels instead");
  const int64_t ekh = (w[2] - 1) * p.dh + 1, ekw = (w[3] - 1) * p.dw + 1;  // dilated kernel extent
  const int64_t ph_in = in[2] + 2 * p.ph, pw_in = in[3] + 2 * p.pw;
  DP_CHECK(w[2] > 0 && w[3] > 0, ShapeError, op, ": kernel size must be positive, but got weight of size ", shape_str(w));
  DP_CHECK(ekh <= ph_in && ekw <= pw_in, ShapeError, op, ": Calculated padded input size per channel: (", ph_in, " x ", pw_in, "). Kernel size: (",
           ekh, " x ", ekw, "). Kernel size can't be greater than actual input size (input ", shape_str(in), ", weight ", shape_str(w), ")");
  Conv2dGeometry g{};
  g.N = in[0];
  g.C = in[1];
  g.H = in[2];
  g.W = in[3];
  g.OC = w[0];
  g.KH = w[2];
  g.KW = w[3];
  g.OH = (ph_in - ekh) / p.sh + 1;
  g.OW = (pw_in - ekw) / p.sw + 1;
  g.sh = p.sh;
  g.sw = p.sw;
  g.ph = p.ph;
  g.pw = p.pw;
  g.dh = p.dh;
  g.dw = p.dw;
  g.groups = p.groups;
  return g;
}

// After check_defined and the same-device check: a float32, float64 or bfloat16 tensor on the CPU
// or a CUDA device, or a float16 one on a CUDA device. The kernels route CUDA tensors to cuDNN
// (src/backend/cuda/conv.cpp); the CPU kernels compute bfloat16 in float32 and round once, as PyTorch's
// CPU convolution does, and have no float16 path (PyTorch's CPU convolution has none either).
void check_tensor(const char* op, const Tensor& t, const char* what) {
  DP_CHECK(backend::capabilities(t.device()).kernels, NotImplementedError, op, ": not implemented for ", t.device().str(), " tensors (", what, " ",
           t.describe(), ")");
  DP_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64 || t.dtype() == kBFloat16 || backend::half_nn_dtype(t.device(), t.dtype()), DTypeError, op,
           ": expected a float32, float64 or bfloat16 ", what, ", but got ", dtype_name(t.dtype()), " ", t.size_str(), " on ", t.device().str(),
           " (float16 is supported on CUDA devices only)");
}

void check_same_dtype(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  DP_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": ", an, " type (", cpp_name(a.dtype()), ") and ", bn, " type (", cpp_name(b.dtype()),
           ") should be the same (", an, " ", a.size_str(), ", ", bn, " ", b.size_str(), ")");
}

// Gradients arrive in the output's dtype; under create_graph keep the conversion on the graph.
Tensor as_dtype(const Tensor& g, DType dt) { return g.dtype() == dt ? g : g.to(dt); }

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p);
Tensor conv_backward_input(IntArrayRef in_size, const Tensor& go, const Tensor& w, const ConvParams& p);
Tensor conv_backward_weight(IntArrayRef w_size, const Tensor& x, const Tensor& go, const ConvParams& p);

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
  const Conv2dGeometry g = make_geometry("conv2d", x.sizes(), w.sizes(), p);
  Tensor out = make_empty({g.N, g.OC, g.OH, g.OW}, x.dtype(), x.device());
  backend::conv2d_forward_kernel(out.device().type, out, backend::contiguous_nograd(x), backend::contiguous_nograd(w),
                                 b.defined() ? backend::contiguous_nograd(b) : Tensor(), g);
  if (autograd::needs_grad(x, w, b)) {
    const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
    SavedVariable sx = need_w ? SavedVariable(x, false) : SavedVariable();
    SavedVariable sw = need_x ? SavedVariable(w, false) : SavedVariable();
    const Shape x_size = x.sizes(), w_size = w.sizes();
    const DType dt = x.dtype();
    autograd::record("ConvolutionBackward0", {x, w, b}, {out}, [=](variable_list&& grads) {
      const Tensor& g_out = grads[0];
      if (!GradMode::is_enabled()) {
        Tensor go = backend::contiguous_nograd(backend::convert_nograd(g_out, dt));
        Tensor xs = need_w ? backend::contiguous_nograd(sx.unpack()) : Tensor();
        Tensor ws = need_x ? backend::contiguous_nograd(sw.unpack()) : Tensor();
        Tensor gx = need_x ? make_empty(x_size, dt, go.device()) : Tensor();
        Tensor gw = need_w ? make_empty(w_size, dt, go.device()) : Tensor();
        Tensor gb = need_b ? make_empty({w_size[0]}, dt, go.device()) : Tensor();
        backend::conv2d_backward_kernel(go.device().type, gx, gw, gb, xs, ws, go, make_geometry("conv2d backward", x_size, w_size, p));
        return variable_list{gx, gw, gb};
      }
      Tensor go = as_dtype(g_out, dt);
      return variable_list{need_x ? conv_backward_input(x_size, go, sw.unpack(), p) : Tensor(),
                           need_w ? conv_backward_weight(w_size, sx.unpack(), go, p) : Tensor(), need_b ? dp::sum(go, {0, 2, 3}) : Tensor()};
    });
  }
  return out;
}

void check_grad_output(const char* op, const Conv2dGeometry& g, const Tensor& go) {
  DP_CHECK(go.dim() == 4 && go.size(0) == g.N && go.size(1) == g.OC && go.size(2) == g.OH && go.size(3) == g.OW, ShapeError, op,
           ": expected grad_output of size [", g.N, ", ", g.OC, ", ", g.OH, ", ", g.OW, "] (the convolution's output size), but got ", go.size_str());
}

Tensor conv_backward_input(IntArrayRef in_size, const Tensor& go, const Tensor& w, const ConvParams& p) {
  const char* op = "conv2d_backward_input";
  const Conv2dGeometry g = make_geometry(op, in_size, w.sizes(), p);
  check_grad_output(op, g, go);
  Tensor gx = make_empty(in_size, go.dtype(), go.device());
  backend::conv2d_backward_kernel((backend::contiguous_nograd(go)).device().type, gx, Tensor(), Tensor(), Tensor(), backend::contiguous_nograd(w),
                                  backend::contiguous_nograd(go), g);
  if (autograd::needs_grad(go, w)) {
    const bool need_go = go.requires_grad(), need_w = w.requires_grad();
    SavedVariable sgo = need_w ? SavedVariable(go, false) : SavedVariable();
    SavedVariable sw = need_go ? SavedVariable(w, false) : SavedVariable();
    const Shape w_size = w.sizes();
    const DType dt = go.dtype();
    autograd::record("Conv2dBackwardInputBackward0", {go, w}, {gx}, [=](variable_list&& grads) {
      Tensor gg = as_dtype(grads[0], dt);
      return variable_list{need_go ? conv_forward(gg, sw.unpack(), Tensor(), p) : Tensor(),
                           need_w ? conv_backward_weight(w_size, gg, sgo.unpack(), p) : Tensor()};
    });
  }
  return gx;
}

Tensor conv_backward_weight(IntArrayRef w_size, const Tensor& x, const Tensor& go, const ConvParams& p) {
  const char* op = "conv2d_backward_weight";
  const Conv2dGeometry g = make_geometry(op, x.sizes(), w_size, p);
  check_grad_output(op, g, go);
  Tensor gw = make_empty(w_size, go.dtype(), go.device());
  backend::conv2d_backward_kernel((backend::contiguous_nograd(go)).device().type, Tensor(), gw, Tensor(), backend::contiguous_nograd(x), Tensor(),
                                  backend::contiguous_nograd(go), g);
  if (autograd::needs_grad(x, go)) {
    const bool need_x = x.requires_grad(), need_go = go.requires_grad();
    SavedVariable sx = need_go ? SavedVariable(x, false) : SavedVariable();
    SavedVariable sgo = need_x ? SavedVariable(go, false) : SavedVariable();
    const Shape x_size = x.sizes();
    const DType dt = go.dtype();
    autograd::record("Conv2dBackwardWeightBackward0", {x, go}, {gw}, [=](variable_list&& grads) {
      Tensor gg = as_dtype(grads[0], dt);
      return variable_list{need_x ? conv_backward_input(x_size, sgo.unpack(), gg, p) : Tensor(),
                           need_go ? conv_forward(sx.unpack(), gg, Tensor(), p) : Tensor()};
    });
  }
  return gw;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
              int64_t groups) {
  if (autocast::detail::Cast ac{autocast::detail::Op::conv2d, {&input, &weight, &bias}})
    return ac([&] { return dp::conv2d(ac[0], ac[1], ac[2], stride, padding, dilation, groups); });
  const char* op = "conv2d";
  ops::check_defined(op, input, "input");
  ops::check_defined(op, weight, "weight");
  ops::check_same_device(op, {&input, &weight, &bias});
  check_tensor(op, input, "input");
  check_tensor(op, weight, "weight");
  check_same_dtype(op, input, "Input", weight, "weight");
  if (bias.defined()) {
    check_tensor(op, bias, "bias");
    check_same_dtype(op, input, "Input", bias, "bias");
  }
  DP_CHECK(input.dim() == 3 || input.dim() == 4, ShapeError, op,
           ": Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: ", input.size_str());
  const ConvParams p = parse_params(op, stride, padding, dilation, groups);
  DP_CHECK(weight.dim() == 4, ShapeError, op,
           ": expected weight to be 4-dimensional [out_channels, in_channels / groups, kH, kW], but got weight of size ", weight.size_str());
  DP_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), ShapeError, op, ": Given weight of size ", weight.size_str(),
           ", expected bias to be 1-dimensional with ", weight.size(0), " elements, but got bias of size ", bias.size_str(), " instead");
  if (input.dim() == 3) return dp::squeeze(conv_forward(dp::unsqueeze(input, 0), weight, bias, p), 0);
  return conv_forward(input, weight, bias, p);
}

Tensor conv2d_backward_input(IntArrayRef input_size, const Tensor& grad_output, const Tensor& weight, IntArrayRef stride, IntArrayRef padding,
                             IntArrayRef dilation, int64_t groups) {
  const char* op = "conv2d_backward_input";
  ops::check_defined(op, grad_output, "grad_output");
  ops::check_defined(op, weight, "weight");
  ops::check_same_device(op, {&grad_output, &weight});
  check_tensor(op, grad_output, "grad_output");
  check_tensor(op, weight, "weight");
  check_same_dtype(op, grad_output, "grad_output", weight, "weight");
  return conv_backward_input(input_size, grad_output, weight, parse_params(op, stride, padding, dilation, groups));
}

Tensor conv2d_backward_weight(IntArrayRef weight_size, const Tensor& input, const Tensor& grad_output, IntArrayRef stride, IntArrayRef padding,
                              IntArrayRef dilation, int64_t groups) {
  const char* op = "conv2d_backward_weight";
  ops::check_defined(op, input, "input");
  ops::check_defined(op, grad_output, "grad_output");
  ops::check_same_device(op, {&input, &grad_output});
  check_tensor(op, input, "input");
  check_tensor(op, grad_output, "grad_output");
  check_same_dtype(op, input, "input", grad_output, "grad_output");
  return conv_backward_weight(weight_size, input, grad_output, parse_params(op, stride, padding, dilation, groups));
}

}  // namespace dp
