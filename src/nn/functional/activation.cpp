// dp::nn::functional activations: forwarders to dp/ops, and leaky_relu written with dp ops.
#include "dp/nn/functional/activation.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"

namespace dp::nn::functional {

Tensor relu(Tensor input, const ReLUFuncOptions& options) {
  if (options.inplace()) return dp::relu_(input);
  return dp::relu(input);
}

Tensor leaky_relu(Tensor input, const LeakyReLUFuncOptions& options) {
  DP_CHECK(input.defined(), ValueError, "leaky_relu: the input is an undefined tensor");
  DP_CHECK(input.is_floating_point(), DTypeError, "leaky_relu: expected a floating point input, got ", dtype_name(input.dtype()), " ",
           input.size_str());
  // where(x > 0, x, slope * x): NaN fails x > 0 and stays NaN through the product; the gradient
  // takes the second branch at 0 (slope), as PyTorch's leaky_relu_backward.
  Tensor out = dp::where(input > 0, input, input * options.negative_slope());
  if (!options.inplace()) return out;
  return input.copy_(out);
}

Tensor gelu(const Tensor& input, const GELUFuncOptions& options) { return dp::gelu(input, options.approximate()); }

Tensor silu(const Tensor& input) { return dp::silu(input); }

namespace {
Tensor with_dtype(const Tensor& input, const SoftmaxFuncOptions& options) { return options.dtype() ? input.to(*options.dtype()) : input; }
}  // namespace

Tensor softmax(const Tensor& input, const SoftmaxFuncOptions& options) { return dp::softmax(with_dtype(input, options), options.dim()); }

Tensor log_softmax(const Tensor& input, const LogSoftmaxFuncOptions& options) { return dp::log_softmax(with_dtype(input, options), options.dim()); }

}  // namespace dp::nn::functional
