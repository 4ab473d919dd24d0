#pragma once
// Inverted dropout (torch.nn.functional.dropout) and its channel-wise form (torch.feature_dropout).
#include "dp/core/generator.h"
#include "dp/core/tensor.h"

namespace dp {

// In training, zeroes each element with probability p and scales the others by 1 / (1 - p); the
// keep mask is drawn from `gen` (nullptr: the input device's default generator) and saved, so the
// gradient is the incoming gradient through the same mask and scale. p must lie in [0, 1]. With
// p = 0, !training or an empty input the input itself is returned (PyTorch); p = 1 gives
// input * 0 (zeros, NaN stays NaN) without drawing. Floating inputs only.
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true, Generator* gen = nullptr);
// The same in place on `input` (its values become input * mask / (1 - p)); returns input.
Tensor& dropout_(Tensor& input, double p = 0.5, bool training = true, Generator* gen = nullptr);
// Channel-wise ("feature") dropout, torch.feature_dropout: for an input [N, C, *] one keep draw
// per (n, c), probability 1 - p, so whole channels are zeroed and the kept ones are scaled by
// 1 / (1 - p): out = input * noise with noise [N, C, 1, ..., 1] holding 0 or 1 / (1 - p) (drawn with
// bernoulli_ from `gen`, or the input device's default generator). The gradient flows through the
// same noise. Needs at least 2 dimensions (ShapeError); p in [0, 1] (ValueError). With p = 0,
// !training or an empty input the input itself is returned; p = 1 gives input * 0 without drawing.
Tensor feature_dropout(const Tensor& input, double p = 0.5, bool training = true, Generator* gen = nullptr);
// The same in place on `input`; returns input.
Tensor& feature_dropout_(Tensor& input, double p = 0.5, bool training = true, Generator* gen = nullptr);

}  // namespace dp
