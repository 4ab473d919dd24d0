// dp::nn::functional embedding: dp::embedding with padding_idx normalised as libtorch does.
#include "dp/nn/functional/embedding.h"
#include "dp/ops/index.h"

namespace dp::nn::functional {

Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& options) {
  DP_CHECK(weight.defined() && input.defined(), ValueError, "embedding: ", weight.defined() ? "input" : "weight", " is an undefined tensor");
  DP_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got ", weight.size_str());
  int64_t padding_idx = -1;  // dp::embedding's "none"
  if (const auto p = options.padding_idx()) {
    const int64_t n = weight.size(0);
    DP_CHECK(*p < n && *p >= -n, ValueError, "embedding: padding_idx must be within num_embeddings (", n, "), got ", *p);
    padding_idx = *p < 0 ? *p + n : *p;
  }
  return dp::embedding(weight, input, padding_idx);
}

}  // namespace dp::nn::functional
