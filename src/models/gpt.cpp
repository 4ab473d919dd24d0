// The GPT model (dp/models/gpt.h): nanoGPT's model.py, module for module, so that the state_dict
// keys, the initialisation and the numbers are the same.
#include "dp/models/gpt.h"

#include <cmath>
#include <limits>
#include <string>
#include "dp/autograd/grad_mode.h"
#include "dp/nn/functional/attention.h"
#include "dp/nn/functional/loss.h"
#include "dp/nn/init.h"
#include "dp/nn/utils/checkpoint.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/reduction.h"
#include "dp/ops/sequence.h"
#include "dp/ops/shape.h"
#include "dp/optim/adam.h"

namespace dp::models {

namespace F = nn::functional;

namespace {

void check_config(const GPTConfig& c) {
  DP_CHECK(c.vocab_size() > 0 && c.block_size() > 0 && c.n_layer() > 0 && c.n_head() > 0 && c.n_embd() > 0, ValueError,
           "GPT: vocab_size, block_size, n_layer, n_head and n_embd must be positive, got vocab_size=", c.vocab_size(),
           " block_size=", c.block_size(), " n_layer=", c.n_layer(), " n_head=", c.n_head(), " n_embd=", c.n_embd());
  DP_CHECK(c.n_embd() % c.n_head() == 0, ValueError, "GPT: n_embd (", c.n_embd(), ") must be divisible by n_head (", c.n_head(), ")");
  DP_CHECK(c.dropout() >= 0.0 && c.dropout() < 1.0, ValueError, "GPT: dropout must be in [0, 1), got ", c.dropout());
}

nn::Linear make_linear(int64_t in, int64_t out, bool bias) { return nn::Linear(nn::LinearOptions(in, out).bias(bias)); }

// LayerNorm always has its bias here (PyTorch 1.13's LayerNorm has no bias switch); `bias` only
// removes the Linears' biases.
nn::LayerNorm make_layer_norm(const GPTConfig& c) { return nn::LayerNorm(nn::LayerNormOptions({c.n_embd()})); }

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& c) : config(c) {
  check_config(c);
  c_attn = register_module("c_attn", make_linear(c.n_embd(), 3 * c.n_embd(), c.bias()));
  c_proj = register_module("c_proj", make_linear(c.n_embd(), c.n_embd(), c.bias()));
  resid_dropout = register_module("resid_dropout", nn::Dropout(c.dropout()));
}

Tensor CausalSelfAttentionImpl::forward(const Tensor& x) const {
  DP_CHECK(x.dim() == 3 && x.size(2) == config.n_embd(), ShapeError, "CausalSelfAttention: expected input [B, T, ", config.n_embd(), "], got ",
           x.describe());
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), nh = config.n_head(), hs = C / nh;
  // One GEMM for q, k and v; the heads are views: [B, T, 3, nh, hs] -> three [B, nh, T, hs].
  Tensor qkv = c_attn(x).view({B, T, 3, nh, hs}).permute({2, 0, 3, 1, 4});
  const double p = is_training() ? config.dropout() : 0.0;
  Tensor y = F::scaled_dot_product_attention(qkv.select(0, 0), qkv.select(0, 1), qkv.select(0, 2), Tensor(), p, /*is_causal=*/true);
  y = y.transpose(1, 2).reshape({B, T, C});
  return resid_dropout(c_proj(y));
}

MLPImpl::MLPImpl(const GPTConfig& c) {
  c_fc = register_module("c_fc", make_linear(c.n_embd(), 4 * c.n_embd(), c.bias()));
  c_proj = register_module("c_proj", make_linear(4 * c.n_embd(), c.n_embd(), c.bias()));
  dropout = register_module("dropout", nn::Dropout(c.dropout()));
}

Tensor MLPImpl::forward(const Tensor& x) const { return dropout(c_proj(gelu(c_fc(x), "tanh"))); }

BlockImpl::BlockImpl(const GPTConfig& c) {
  ln_1 = register_module("ln_1", make_layer_norm(c));
  attn = register_module("attn", CausalSelfAttention(c));
  ln_2 = register_module("ln_2", make_layer_norm(c));
  mlp = register_module("mlp", MLP(c));
}

Tensor BlockImpl::forward(const Tensor& x) const {
  Tensor y = x + attn(ln_1(x));
  return y + mlp(ln_2(y));
}

GPTBodyImpl::GPTBodyImpl(const GPTConfig& c) : nn::Module("ModuleDict") {
  wte = register_module("wte", nn::Embedding(c.vocab_size(), c.n_embd()));
  wpe = register_module("wpe", nn::Embedding(c.block_size(), c.n_embd()));
  drop = register_module("drop", nn::Dropout(c.dropout()));
  h = register_module("h", nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer(); ++i) h->push_back(Block(c));
  ln_f = register_module("ln_f", make_layer_norm(c));
}

GPTImpl::GPTImpl(const GPTConfig& c) : nn::Module("GPT"), config(c) {
  check_config(c);
  transformer = register_module("transformer", GPTBody(c));
  lm_head = register_module("lm_head", make_linear(c.n_embd(), c.vocab_size(), false));
  // Weight tying (nanoGPT: transformer.wte.weight = lm_head.weight): one tensor, registered under
  // both names, so both uses add into one gradient and the optimizer sees it once.
  transformer->wte->weight = lm_head->weight;
  reset_parameters();
}

void GPTImpl::reset_parameters() {
  NoGradGuard no_grad;
  for (const auto& item : named_modules("", /*include_self=*/false)) {
    nn::Module& m = *item.value();
    if (auto* lin = dynamic_cast<nn::LinearImpl*>(&m)) {
      nn::init::normal_(lin->weight, 0.0, 0.02);
      if (lin->bias.defined()) nn::init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<nn::EmbeddingImpl*>(&m)) {
      nn::init::normal_(emb->weight, 0.0, 0.02);
    } else if (auto* ln = dynamic_cast<nn::LayerNormImpl*>(&m)) {
      if (ln->weight.defined()) nn::init::ones_(ln->weight);
      if (ln->bias.defined()) nn::init::zeros_(ln->bias);
    }
  }
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer()));
  for (const auto& item : named_parameters()) {
    const std::string& name = item.key();
    if (name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0) {
      Tensor w = item.value();
      nn::init::normal_(w, 0.0, proj_std);
    }
  }
}

Tensor GPTImpl::forward(const Tensor& idx) const {
  DP_CHECK(idx.dim() == 2, ShapeError, "GPT: expected token ids [B, T], got ", idx.describe());
  DP_CHECK(idx.dtype() == kInt64 || idx.dtype() == kInt32, DTypeError, "GPT: token ids must be int64 (or int32), got ", idx.describe());
  const int64_t T = idx.size(1);
  DP_CHECK(T <= config.block_size(), ShapeError, "GPT: cannot forward a sequence of length ", T, ", the block size is only ", config.block_size());
  Tensor pos = arange(0, T, 1, TensorOptions().dtype(kInt64).device(idx.device()));
  Tensor x = transformer->drop(transformer->wte(idx) + transformer->wpe(pos));
  // With checkpoint_activations, a training forward that records gradients keeps only each block's
  // input; the block is recomputed in backward (dp/nn/utils/checkpoint.h).
  const bool checkpointed = config.checkpoint_activations() && is_training() && GradMode::is_enabled();
  for (size_t i = 0; i < transformer->h->size(); ++i) {
    auto block = std::static_pointer_cast<BlockImpl>((*transformer->h)[i]);
    if (checkpointed)
      x = utils::checkpoint([block](const Tensor& t) { return block->forward(t); }, x);
    else
      x = block->forward(x);
  }
  return lm_head(transformer->ln_f(x));
}

Tensor GPTImpl::generate(const Tensor& idx, int64_t max_new_tokens, const SampleOptions& options) const {
  DP_CHECK(max_new_tokens >= 0, ValueError, "GPT::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  DP_CHECK(options.temperature() > 0.0, ValueError, "GPT::generate: temperature must be > 0, got ", options.temperature());
  DP_CHECK(options.top_k() >= 0, ValueError, "GPT::generate: top_k must be >= 0, got ", options.top_k());
  NoGradGuard no_grad;
  Tensor out = idx;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t T = out.size(1);
    Tensor context = T <= config.block_size() ? out : out.slice(1, T - config.block_size());
    Tensor logits = forward(context).select(1, context.size(1) - 1) / options.temperature();  // [B, V]
    if (options.top_k() > 0 && options.top_k() < logits.size(1)) {
      Tensor kth = topk(logits, options.top_k(), -1).first.narrow(1, options.top_k() - 1, 1);
      logits = masked_fill(logits, lt(logits, kth), -std::numeric_limits<double>::infinity());
    }
    Tensor next = multinomial(softmax(logits, -1), 1, false, options.generator());
    out = cat({out, next.to(out.dtype())}, 1);
  }
  return out;
}

int64_t GPTImpl::num_params(bool non_embedding) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  if (non_embedding) n -= transformer->wpe->weight.numel();
  return n;
}

Tensor lm_loss(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  DP_CHECK(logits.dim() == 3, ShapeError, "lm_loss: expected logits [B, T, V], got ", logits.describe());
  DP_CHECK(targets.dim() == 2 && targets.size(0) == logits.size(0) && targets.size(1) == logits.size(1), ShapeError,
           "lm_loss: expected targets [B, T] = [", logits.size(0), ", ", logits.size(1), "], got ", targets.describe());
  return F::cross_entropy(logits.flatten(0, 1), targets.flatten(), F::CrossEntropyFuncOptions().ignore_index(ignore_index));
}

std::vector<optim::OptimizerParamGroup> weight_decay_groups(const nn::Module& model, double weight_decay) {
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(decay), optim::AdamWOptions().weight_decay(weight_decay));
  groups.emplace_back(std::move(no_decay), optim::AdamWOptions().weight_decay(0.0));
  return groups;
}

double cosine_lr(int64_t it, double max_lr, double min_lr, int64_t warmup_iters, int64_t lr_decay_iters) {
  if (it < warmup_iters) return max_lr * static_cast<double>(it + 1) / static_cast<double>(warmup_iters);
  if (it >= lr_decay_iters) return min_lr;
  const double ratio = static_cast<double>(it - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (max_lr - min_lr);
}

}  // namespace dp::models
