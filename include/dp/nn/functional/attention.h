#pragma once
// Attention (torch.nn.functional.scaled_dot_product_attention, PyTorch 2.x semantics).
#include <optional>
#include "dp/core/tensor.h"

namespace dp::nn::functional {

// softmax(scale * q k^T + bias) v over the last two dims; q [N..., Hq, L, E], k [N..., H, S, E],
// v [N..., H, S, Ev] -> [N..., Hq, L, Ev]. attn_mask broadcasts to [N..., L, S]: bool (true: may
// attend) or floating (added to the scores). is_causal masks keys j > i (top-left aligned; an
// error together with attn_mask). dropout_p > 0 drops attention weights (always: pass
// `training ? p : 0`). scale defaults to 1/sqrt(E). enable_gqa repeats k/v heads when Hq % H == 0.
// A fully masked row gives zeros, not NaN.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = Tensor(),
                                    double dropout_p = 0.0, bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    bool enable_gqa = false);

}  // namespace dp::nn::functional
