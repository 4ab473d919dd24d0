// dp::nn::functional pooling: forwarders to dp/ops/pooling.h with the modules' options.
#include "dp/nn/functional/pooling.h"
#include "dp/ops/pooling.h"

namespace dp::nn::functional {

Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& o) {
  return dp::max_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& o) {
  return dp::max_pool2d_with_indices(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}

Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& o) {
  return dp::avg_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(), o.count_include_pad(), o.divisor_override());
}

Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& o) { return dp::adaptive_avg_pool2d(input, o.output_size()); }

}  // namespace dp::nn::functional
