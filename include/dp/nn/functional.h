#pragma once
// dp::nn::functional: the stateless forms of the layers and losses, with libtorch's options
// structs (torch::nn::functional). Where libtorch reuses a module's options (MaxPool2dFuncOptions is
// MaxPool2dOptions, CrossEntropyFuncOptions is CrossEntropyLossOptions) so does this. Each function
// forwards to the dp op of dp/ops/*.h; leaky_relu, normalize and pad are written with dp ops.
//
//   namespace F = dp::nn::functional;
//   x = F::relu(F::max_pool2d(F::conv2d(x, w, F::Conv2dFuncOptions().bias(b)), F::MaxPool2dFuncOptions(2)));
//   x = F::dropout(x, F::DropoutFuncOptions().p(0.5).training(is_training()));
//   auto loss = F::cross_entropy(x, y, F::CrossEntropyFuncOptions().ignore_index(-1));
#include "dp/nn/functional/activation.h"
#include "dp/nn/functional/attention.h"
#include "dp/nn/functional/conv.h"
#include "dp/nn/functional/dropout.h"
#include "dp/nn/functional/embedding.h"
#include "dp/nn/functional/loss.h"
#include "dp/nn/functional/normalization.h"
#include "dp/nn/functional/padding.h"
#include "dp/nn/functional/pooling.h"
