#pragma once
// dp::nn::functional pooling (torch::nn::functional's). As in libtorch the options are the
// modules' (MaxPool2dFuncOptions is MaxPool2dOptions): one int or two per size, stride defaulting to
// the kernel size.
//
//   namespace F = dp::nn::functional;
//   y = F::max_pool2d(x, F::MaxPool2dFuncOptions(2).stride(2));
#include <utility>
#include "dp/core/tensor.h"
#include "dp/nn/modules/pooling.h"

namespace dp::nn::functional {

using MaxPool2dFuncOptions = MaxPool2dOptions;
using AvgPool2dFuncOptions = AvgPool2dOptions;
using AdaptiveAvgPool2dFuncOptions = AdaptiveAvgPool2dOptions;

Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& options);
// The output and the int64 indices of the maxima (dp::max_pool2d_with_indices).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& options);
Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& options);
Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& options);

}  // namespace dp::nn::functional
