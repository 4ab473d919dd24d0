#pragma once
#include <cstdint>
#include <optional>
#include "dp/nn/module.h"

namespace dp::nn {

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim) : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  // Rows at this index get no gradient and start at zero (negative counts from the end).
  EmbeddingOptions& padding_idx(std::optional<int64_t> p) {
    padding_idx_ = p;
    return *this;
  }
  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  std::optional<int64_t> padding_idx_;
};

// A lookup table: forward(indices [*]) -> [*, embedding_dim]; weight ~ N(0, 1) as PyTorch.
class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim) : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& indices) const;
  std::string extra_repr() const override;

  EmbeddingOptions options;
  Tensor weight;

 private:
  int64_t padding_index() const;  // normalised to [0, num) or -1 for none
};
using Embedding = ModuleHolder<EmbeddingImpl>;

}  // namespace dp::nn
