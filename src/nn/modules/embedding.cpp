#include "dp/nn/modules/embedding.h"

#include "dp/autograd/grad_mode.h"
#include "dp/nn/init.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"

namespace dp::nn {

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& opts) : options(opts) {
  DP_CHECK(options.num_embeddings() >= 0 && options.embedding_dim() >= 0, ValueError, "Embedding: sizes must be non-negative, got ",
           options.num_embeddings(), " and ", options.embedding_dim());
  if (auto p = options.padding_idx()) {
    DP_CHECK(*p < options.num_embeddings() && *p >= -options.num_embeddings(), IndexError, "Embedding: padding_idx must be within num_embeddings (",
             options.num_embeddings(), "), got ", *p);
  }
  weight = register_parameter("weight", empty({options.num_embeddings(), options.embedding_dim()}));
  bind_tensor<&EmbeddingImpl::weight>("weight");
  reset_parameters();
}

int64_t EmbeddingImpl::padding_index() const {
  auto p = options.padding_idx();
  if (!p) return -1;
  return *p < 0 ? *p + options.num_embeddings() : *p;
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (int64_t p = padding_index(); p >= 0) {
    NoGradGuard no_grad;
    weight.select(0, p).fill_(0.0);
  }
}

Tensor EmbeddingImpl::forward(const Tensor& indices) const { return embedding(weight, indices, padding_index()); }

std::string EmbeddingImpl::extra_repr() const {
  std::string s = std::to_string(options.num_embeddings()) + ", " + std::to_string(options.embedding_dim());
  if (options.padding_idx()) s += ", padding_idx=" + std::to_string(padding_index());
  return s;
}

}  // namespace dp::nn
