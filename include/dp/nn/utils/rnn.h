#pragma once
// Variable-length sequences (torch.nn.utils.rnn): padding and packing.
#include <vector>
#include "dp/core/tensor.h"

namespace dp::nn::utils::rnn {

// torch.nn.utils.rnn.pad_sequence: sequences [L_i, *] (same trailing shape, dtype and device)
// stacked into [L_max, B, *] ([B, L_max, *] with batch_first), the tail filled with padding_value.
// Differentiable.
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0);

}  // namespace dp::nn::utils::rnn
