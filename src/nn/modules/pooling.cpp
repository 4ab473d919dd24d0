#include "dp/nn/modules/pooling.h"

#include "dp/ops/pooling.h"

namespace dp::nn {

Tensor MaxPool2dImpl::forward(const Tensor& input) const {
  return max_pool2d(input, options.kernel_size(), options.stride(), options.padding(), options.dilation(), options.ceil_mode());
}

std::pair<Tensor, Tensor> MaxPool2dImpl::forward_with_indices(const Tensor& input) const {
  return max_pool2d_with_indices(input, options.kernel_size(), options.stride(), options.padding(), options.dilation(), options.ceil_mode());
}

std::string MaxPool2dImpl::extra_repr() const {
  return "kernel_size=" + options.kernel_size().str() + ", stride=" + options.stride().str() + ", padding=" + options.padding().str() +
         ", dilation=" + options.dilation().str() + ", ceil_mode=" + (options.ceil_mode() ? "True" : "False");
}

Tensor AvgPool2dImpl::forward(const Tensor& input) const {
  return avg_pool2d(input, options.kernel_size(), options.stride(), options.padding(), options.ceil_mode(), options.count_include_pad(),
                    options.divisor_override());
}

std::string AvgPool2dImpl::extra_repr() const {
  return "kernel_size=" + options.kernel_size().str() + ", stride=" + options.stride().str() + ", padding=" + options.padding().str();
}

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& input) const { return adaptive_avg_pool2d(input, options.output_size()); }

}  // namespace dp::nn
