#pragma once
// dp::nn::functional embedding (torch::nn::functional's): rows of `weight` picked by `input`.
//
//   namespace F = dp::nn::functional;
//   e = F::embedding(tokens, table, F::EmbeddingFuncOptions().padding_idx(0));
#include <cstdint>
#include <optional>
#include "dp/core/tensor.h"

namespace dp::nn::functional {

struct EmbeddingFuncOptions {
  // The row that gets no gradient; negative counts from the end. Must lie in
  // [-num_embeddings, num_embeddings) (ValueError).
  EmbeddingFuncOptions& padding_idx(std::optional<int64_t> v) {
    padding_idx_ = v;
    return *this;
  }
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

 private:
  std::optional<int64_t> padding_idx_;
};

// input: int64 (or int32) indices of any shape; weight [num_embeddings, dim]. Result
// input.shape + [dim] (dp::embedding).
Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& options = {});

}  // namespace dp::nn::functional
