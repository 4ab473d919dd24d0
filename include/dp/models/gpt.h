#pragma once
// A GPT-2-shaped decoder-only Transformer (karpathy/nanoGPT's model.py in C++): token and position
// embeddings, pre-LayerNorm blocks with one fused QKV projection and causal attention
// (F::scaled_dot_product_attention), a tanh-GELU MLP, a final LayerNorm and an output head tied to
// the token embedding. Its state_dict keys are nanoGPT's ("transformer.wte.weight",
// "transformer.h.0.attn.c_attn.weight", ..., "lm_head.weight"), so a nanoGPT checkpoint's tensors
// load by name and ours load into nanoGPT.
//
//   dp::models::GPT model(dp::models::GPTConfig().vocab_size(65).block_size(256).n_layer(4).n_head(4).n_embd(256));
//   dp::Tensor logits = model(idx);                                    // idx [B, T] int64 -> [B, T, V]
//   dp::Tensor loss = dp::models::lm_loss(logits, targets);            // mean over tokens, -1 ignored
//   dp::optim::AdamW opt(dp::models::weight_decay_groups(*model, 0.1), dp::optim::AdamWOptions(6e-4).betas({0.9, 0.95}));
//   dp::Tensor text = model->generate(prompt, 100, dp::models::SampleOptions().temperature(0.8).top_k(20));
#include <cstdint>
#include <optional>
#include <vector>
#include "dp/nn/module.h"
#include "dp/nn/modules/container.h"
#include "dp/nn/modules/dropout.h"
#include "dp/nn/modules/embedding.h"
#include "dp/nn/modules/linear.h"
#include "dp/nn/modules/normalization.h"
#include "dp/optim/optimizer.h"

namespace dp {
class Generator;
}

namespace dp::models {

// nanoGPT's GPTConfig; the defaults are GPT-2 small (124M parameters).
struct GPTConfig {
#define DP_GPT_ARG(T, name, def)     \
  GPTConfig& name(T v) {             \
    name##_ = v;                     \
    return *this;                    \
  }                                  \
  T name() const { return name##_; } \
  T name##_ = def
  DP_GPT_ARG(int64_t, vocab_size, 50257);
  DP_GPT_ARG(int64_t, block_size, 1024);  // the longest sequence (rows of the position embedding)
  DP_GPT_ARG(int64_t, n_layer, 12);
  DP_GPT_ARG(int64_t, n_head, 12);
  DP_GPT_ARG(int64_t, n_embd, 768);
  DP_GPT_ARG(double, dropout, 0.0);  // on embeddings, attention weights, and after each residual branch
  DP_GPT_ARG(bool, bias, true);      // biases in the Linears (the LayerNorms always have theirs)
  // Activation checkpointing (not in nanoGPT): in training with grad enabled, each block keeps
  // only its input and is recomputed in backward (dp::utils::checkpoint), trading one more
  // forward of the blocks for their activations' memory. Same gradients.
  DP_GPT_ARG(bool, checkpoint_activations, false);
#undef DP_GPT_ARG
};

// Multi-head causal self-attention with one fused QKV projection (c_attn [3C, C]) and an output
// projection (c_proj [C, C]).
class CausalSelfAttentionImpl : public nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GPTConfig& config);
  Tensor forward(const Tensor& x) const;  // [B, T, C] -> [B, T, C]

  GPTConfig config;
  nn::Linear c_attn{nullptr};
  nn::Linear c_proj{nullptr};
  nn::Dropout resid_dropout{nullptr};
};
using CausalSelfAttention = nn::ModuleHolder<CausalSelfAttentionImpl>;

// Linear(C, 4C) -> GELU(tanh) -> Linear(4C, C) -> Dropout.
class MLPImpl : public nn::Module {
 public:
  explicit MLPImpl(const GPTConfig& config);
  Tensor forward(const Tensor& x) const;

  nn::Linear c_fc{nullptr};
  nn::Linear c_proj{nullptr};
  nn::Dropout dropout{nullptr};
};
using MLP = nn::ModuleHolder<MLPImpl>;

// x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class BlockImpl : public nn::Module {
 public:
  explicit BlockImpl(const GPTConfig& config);
  Tensor forward(const Tensor& x) const;

  nn::LayerNorm ln_1{nullptr};
  CausalSelfAttention attn{nullptr};
  nn::LayerNorm ln_2{nullptr};
  MLP mlp{nullptr};
};
using Block = nn::ModuleHolder<BlockImpl>;

// The "transformer" child of nanoGPT's GPT (a ModuleDict there): wte, wpe, drop, h, ln_f.
class GPTBodyImpl : public nn::Module {
 public:
  explicit GPTBodyImpl(const GPTConfig& config);

  nn::Embedding wte{nullptr};
  nn::Embedding wpe{nullptr};
  nn::Dropout drop{nullptr};
  nn::ModuleList h{nullptr};
  nn::LayerNorm ln_f{nullptr};
};
using GPTBody = nn::ModuleHolder<GPTBodyImpl>;

// Sampling settings of GPT::generate.
struct SampleOptions {
  SampleOptions& temperature(double t) {
    temperature_ = t;
    return *this;
  }
  // Keep only the k most likely tokens (0: all).
  SampleOptions& top_k(int64_t k) {
    top_k_ = k;
    return *this;
  }
  SampleOptions& generator(Generator* g) {
    generator_ = g;
    return *this;
  }
  double temperature() const { return temperature_; }
  int64_t top_k() const { return top_k_; }
  Generator* generator() const { return generator_; }

 private:
  double temperature_ = 1.0;
  int64_t top_k_ = 0;
  Generator* generator_ = nullptr;
};

class GPTImpl : public nn::Module {
 public:
  explicit GPTImpl(const GPTConfig& config);
  // nanoGPT's initialisation: Linear and Embedding weights N(0, 0.02), biases zero, LayerNorm
  // (1, 0), then every c_proj.weight N(0, 0.02 / sqrt(2 * n_layer)). Uses the default generator.
  void reset_parameters();
  // idx [B, T] (int64 token ids, T <= block_size) -> logits [B, T, vocab_size].
  Tensor forward(const Tensor& idx) const;
  // Appends max_new_tokens sampled tokens to idx [B, T] (the context is cropped to block_size),
  // without recording gradients. Returns [B, T + max_new_tokens].
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, const SampleOptions& options = {}) const;
  // Parameters; non_embedding leaves out the position embedding (nanoGPT's get_num_params).
  int64_t num_params(bool non_embedding = true) const;

  GPTConfig config;
  GPTBody transformer{nullptr};
  nn::Linear lm_head{nullptr};  // no bias; its weight is transformer->wte->weight
};
using GPT = nn::ModuleHolder<GPTImpl>;

// The language-model loss: cross-entropy of logits [B, T, V] against targets [B, T] (int64),
// averaged over the tokens whose target is not ignore_index.
Tensor lm_loss(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -1);

// nanoGPT's AdamW parameter groups: tensors with dim >= 2 (matmul weights, embeddings) decay by
// `weight_decay`, the rest (biases, LayerNorm) by 0.
std::vector<optim::OptimizerParamGroup> weight_decay_groups(const nn::Module& model, double weight_decay);

// nanoGPT's learning rate at iteration `it`: linear warm-up over warmup_iters to max_lr, then a
// cosine down to min_lr at lr_decay_iters, min_lr after.
double cosine_lr(int64_t it, double max_lr, double min_lr, int64_t warmup_iters, int64_t lr_decay_iters);

}  // namespace dp::models
