#pragma once
// dp::nn::functional linear and conv2d (torch::nn::functional's).
//
//   namespace F = dp::nn::functional;
//   y = F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(1).padding(1));
//   z = F::linear(y.flatten(1), w2, b2);
#include <cstdint>
#include "dp/core/tensor.h"
#include "dp/nn/modules/conv.h"

namespace dp::nn::functional {

// libtorch's Conv2dFuncOptions: the bias travels in the options; stride, padding and dilation take
// one int (both dims) or two.
struct Conv2dFuncOptions {
  Conv2dFuncOptions& bias(Tensor v) {
    bias_ = std::move(v);
    return *this;
  }
  Conv2dFuncOptions& stride(ExpandingArray<2> v) {
    stride_ = v;
    return *this;
  }
  Conv2dFuncOptions& padding(ExpandingArray<2> v) {
    padding_ = v;
    return *this;
  }
  Conv2dFuncOptions& dilation(ExpandingArray<2> v) {
    dilation_ = v;
    return *this;
  }
  Conv2dFuncOptions& groups(int64_t v) {
    groups_ = v;
    return *this;
  }
  const Tensor& bias() const { return bias_; }
  const ExpandingArray<2>& stride() const { return stride_; }
  const ExpandingArray<2>& padding() const { return padding_; }
  const ExpandingArray<2>& dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }

 private:
  Tensor bias_;
  ExpandingArray<2> stride_ = 1;
  ExpandingArray<2> padding_ = 0;
  ExpandingArray<2> dilation_ = 1;
  int64_t groups_ = 1;
};

// x @ weight^T + bias (dp::linear); bias may be undefined.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});
// dp::conv2d with the options' bias, stride, padding, dilation and groups.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Conv2dFuncOptions& options = {});

}  // namespace dp::nn::functional
