// dp::nn::functional linear and conv2d: forwarders to dp::linear / dp::conv2d.
#include "dp/nn/functional/conv.h"
#include "dp/ops/conv.h"
#include "dp/ops/linalg.h"

namespace dp::nn::functional {

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) { return dp::linear(input, weight, bias); }

Tensor conv2d(const Tensor& input, const Tensor& weight, const Conv2dFuncOptions& options) {
  return dp::conv2d(input, weight, options.bias(), options.stride(), options.padding(), options.dilation(), options.groups());
}

}  // namespace dp::nn::functional
