// dp::nn::functional::scaled_dot_product_attention: forwards to dp::scaled_dot_product_attention.
#include "dp/nn/functional/attention.h"
#include "dp/ops/attention.h"

namespace dp::nn::functional {

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask, double dropout_p,
                                    bool is_causal, std::optional<double> scale, bool enable_gqa) {
  return dp::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace dp::nn::functional
