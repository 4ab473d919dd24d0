#pragma once
// 2-D pooling (torch.nn.functional.max_pool2d / avg_pool2d / adaptive_avg_pool2d), float32,
// float64 and bfloat16 (sums in float32, each result rounded once; float16 on CUDA devices only),
// NCHW or unbatched [C, H, W]. Integer pairs take one value (both dims) or two (height,
// width); an empty stride means stride = kernel_size. Output sizes follow PyTorch exactly:
//   out = floor_or_ceil((in + 2 * pad - dilation * (k - 1) - 1) / stride) + 1
// and with ceil_mode the last window must start inside the input or the left padding.
#include <cstdint>
#include <optional>
#include <utility>
#include "dp/core/tensor.h"

namespace dp {

// The gradient goes to the (first) maximum of each window.
Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = {0, 0}, IntArrayRef dilation = {1, 1},
                  bool ceil_mode = false);
// Also returns the int64 indices of the maxima, flattened over each input plane (h * W + w), as
// PyTorch's return_indices=True.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = {0, 0},
                                                  IntArrayRef dilation = {1, 1}, bool ceil_mode = false);

// Windows overlapping the padding divide by the window clipped to the padded input
// (count_include_pad) or by the number of input elements in it; divisor_override replaces both.
Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = {0, 0}, bool ceil_mode = false,
                  bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);

// Output cell i averages input rows floor(i * H / OH) .. ceil((i + 1) * H / OH) - 1 (same for columns).
Tensor adaptive_avg_pool2d(const Tensor& input, IntArrayRef output_size);

}  // namespace dp
