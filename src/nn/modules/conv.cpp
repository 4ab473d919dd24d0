#include "dp/nn/modules/conv.h"

#include <cmath>
#include "dp/nn/init.h"
#include "dp/ops/conv.h"
#include "dp/ops/factory.h"

namespace dp::nn {

Conv2dImpl::Conv2dImpl(const Conv2dOptions& opts) : options(opts) {
  const int64_t in = options.in_channels(), out = options.out_channels(), groups = options.groups();
  DP_CHECK(groups > 0, ValueError, "Conv2d: groups must be a positive integer, got ", groups);
  DP_CHECK(in >= 0 && out >= 0, ValueError, "Conv2d: in_channels and out_channels must be non-negative, got ", in, " and ", out);
  DP_CHECK(in % groups == 0, ValueError, "Conv2d: in_channels must be divisible by groups (in_channels=", in, ", groups=", groups, ")");
  DP_CHECK(out % groups == 0, ValueError, "Conv2d: out_channels must be divisible by groups (out_channels=", out, ", groups=", groups, ")");
  const auto& k = options.kernel_size();
  DP_CHECK(k[0] > 0 && k[1] > 0, ValueError, "Conv2d: kernel_size must be positive, got ", k.tuple_str());
  // The remaining arguments are checked by conv2d itself, but a module that can never run should
  // fail when it is built, not at its first forward.
  DP_CHECK(options.stride()[0] > 0 && options.stride()[1] > 0, ValueError, "Conv2d: non-positive stride is not supported, got ",
           options.stride().tuple_str());
  DP_CHECK(options.padding()[0] >= 0 && options.padding()[1] >= 0, ValueError, "Conv2d: negative padding is not supported, got ",
           options.padding().tuple_str());
  DP_CHECK(options.dilation()[0] > 0 && options.dilation()[1] > 0, ValueError, "Conv2d: dilation should be greater than zero, got ",
           options.dilation().tuple_str());
  weight = register_parameter("weight", empty({out, in / groups, k[0], k[1]}));
  bias = register_parameter("bias", options.bias() ? empty({out}) : Tensor());
  bind_tensor<&Conv2dImpl::weight>("weight");
  bind_tensor<&Conv2dImpl::bias>("bias");
  reset_parameters();
}

void Conv2dImpl::reset_parameters() {
  // PyTorch's _ConvNd.reset_parameters: kaiming_uniform_(a=sqrt(5)) on the weight (bound
  // 1/sqrt(fan_in)), and the bias uniform in the same bound.
  const int64_t fan_in = weight.numel() == 0 ? 0 : weight.size(1) * weight.size(2) * weight.size(3);
  if (fan_in > 0) {
    init::kaiming_uniform_(weight, std::sqrt(5.0));
  } else {
    init::zeros_(weight);
  }
  if (bias.defined()) {
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2dImpl::forward(const Tensor& input) const {
  return conv2d(input, weight, bias, options.stride(), options.padding(), options.dilation(), options.groups());
}

std::string Conv2dImpl::extra_repr() const {
  std::string s = std::to_string(options.in_channels()) + ", " + std::to_string(options.out_channels()) +
                  ", kernel_size=" + options.kernel_size().tuple_str() + ", stride=" + options.stride().tuple_str();
  if (!options.padding().all_equal(0)) s += ", padding=" + options.padding().tuple_str();
  if (!options.dilation().all_equal(1)) s += ", dilation=" + options.dilation().tuple_str();
  if (options.groups() != 1) s += ", groups=" + std::to_string(options.groups());
  if (!options.bias()) s += ", bias=False";
  return s;
}

}  // namespace dp::nn
