#pragma once
// The Transformer layers (torch.nn.TransformerEncoderLayer, TransformerDecoderLayer,
// TransformerEncoder, TransformerDecoder, Transformer): PyTorch's options, children, parameter
// names (a PyTorch state_dict loads), forward arguments and printing.
#include <cstdint>
#include <functional>
#include <string>
#include "dp/nn/module.h"
#include "dp/nn/modules/attention.h"
#include "dp/nn/modules/container.h"
#include "dp/nn/modules/dropout.h"
#include "dp/nn/modules/linear.h"
#include "dp/nn/modules/normalization.h"
#include "dp/ops/factory.h"

namespace dp::nn {

// The feed-forward activation: "relu", "gelu" (exact, erf) or any unary function.
using TransformerActivation = std::function<Tensor(const Tensor&)>;

// Options of TransformerEncoderLayer and TransformerDecoderLayer (the same in PyTorch).
struct TransformerLayerOptions {
  TransformerLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TransformerLayerOptions& dim_feedforward(int64_t v) {
    dim_feedforward_ = v;
    return *this;
  }
  // Dropout after attention, inside the feed-forward block and after it (training mode only);
  // also the attention weights' dropout.
  TransformerLayerOptions& dropout(double p) {
    dropout_ = p;
    return *this;
  }
  // "relu" or "gelu"; anything else is a ValueError when the layer is built.
  TransformerLayerOptions& activation(std::string name) {
    activation_name_ = std::move(name);
    activation_fn_ = nullptr;
    return *this;
  }
  TransformerLayerOptions& activation(TransformerActivation fn) {
    activation_name_ = "<callable>";
    activation_fn_ = std::move(fn);
    return *this;
  }
  TransformerLayerOptions& layer_norm_eps(double v) {
    layer_norm_eps_ = v;
    return *this;
  }
  // Inputs and output [N, T, E] instead of [T, N, E].
  TransformerLayerOptions& batch_first(bool b) {
    batch_first_ = b;
    return *this;
  }
  // Pre-norm: x + block(norm(x)) instead of norm(x + block(x)).
  TransformerLayerOptions& norm_first(bool b) {
    norm_first_ = b;
    return *this;
  }
  int64_t d_model() const { return d_model_; }
  int64_t nhead() const { return nhead_; }
  int64_t dim_feedforward() const { return dim_feedforward_; }
  double dropout() const { return dropout_; }
  // "relu", "gelu", or "<callable>" when a function was given (activation_fn()).
  const std::string& activation_name() const { return activation_name_; }
  const TransformerActivation& activation_fn() const { return activation_fn_; }
  double layer_norm_eps() const { return layer_norm_eps_; }
  bool batch_first() const { return batch_first_; }
  bool norm_first() const { return norm_first_; }

 private:
  int64_t d_model_;
  int64_t nhead_;
  int64_t dim_feedforward_ = 2048;
  double dropout_ = 0.1;
  std::string activation_name_ = "relu";
  TransformerActivation activation_fn_;
  double layer_norm_eps_ = 1e-5;
  bool batch_first_ = false;
  bool norm_first_ = false;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

// Self-attention and a feed-forward block, each with a residual connection and LayerNorm:
//   post-norm (default): x = norm1(x + dropout1(SA(x)));       x = norm2(x + dropout2(FF(x)))
//   norm_first:          x = x + dropout1(SA(norm1(x)));       x = x + dropout2(FF(norm2(x)))
// with FF(x) = linear2(dropout(activation(linear1(x)))) and SA = self_attn(x, x, x, need_weights =
// false). forward(src [S, N, E] ([N, S, E] with batch_first; unbatched [S, E]), src_mask [S, S]
// or [N*nhead, S, S], src_key_padding_mask [N, S], is_causal) -> like src. Masks as
// MultiheadAttention's (bool True = blocked, float added); is_causal is a hint that src_mask is
// the causal mask (see MultiheadAttention).
// Children (state_dict prefixes, in PyTorch's order): self_attn, linear1, dropout, linear2, norm1,
// norm2, dropout1, dropout2.
class TransformerEncoderLayerImpl : public Module {
 public:
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead) : TransformerEncoderLayerImpl(TransformerEncoderLayerOptions(d_model, nhead)) {}
  explicit TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options);
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {}, bool is_causal = false) const;

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn{nullptr};
  Linear linear1{nullptr};
  Dropout dropout{nullptr};
  Linear linear2{nullptr};
  LayerNorm norm1{nullptr};
  LayerNorm norm2{nullptr};
  Dropout dropout1{nullptr};
  Dropout dropout2{nullptr};
  TransformerActivation activation;
};
using TransformerEncoderLayer = ModuleHolder<TransformerEncoderLayerImpl>;

// Self-attention, attention over the encoder's output (memory) and a feed-forward block:
//   post-norm: x = norm1(x + SA(x)); x = norm2(x + MHA(x, memory)); x = norm3(x + FF(x))
//   norm_first: x = x + SA(norm1(x)); x = x + MHA(norm2(x), memory); x = x + FF(norm3(x))
// (each block followed by its dropout1/2/3). forward(tgt [T, N, E], memory [S, N, E] (batch_first:
// [N, T, E], [N, S, E]; unbatched [T, E], [S, E]), tgt_mask [T, T], memory_mask [T, S],
// tgt_key_padding_mask [N, T], memory_key_padding_mask [N, S], tgt_is_causal, memory_is_causal).
// Children: self_attn, multihead_attn, linear1, dropout, linear2, norm1, norm2, norm3, dropout1,
// dropout2, dropout3.
class TransformerDecoderLayerImpl : public Module {
 public:
  TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead) : TransformerDecoderLayerImpl(TransformerDecoderLayerOptions(d_model, nhead)) {}
  explicit TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& options);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false) const;

  TransformerDecoderLayerOptions options;
  MultiheadAttention self_attn{nullptr};
  MultiheadAttention multihead_attn{nullptr};
  Linear linear1{nullptr};
  Dropout dropout{nullptr};
  Linear linear2{nullptr};
  LayerNorm norm1{nullptr};
  LayerNorm norm2{nullptr};
  LayerNorm norm3{nullptr};
  Dropout dropout1{nullptr};
  Dropout dropout2{nullptr};
  Dropout dropout3{nullptr};
  TransformerActivation activation;
};
using TransformerDecoderLayer = ModuleHolder<TransformerDecoderLayerImpl>;

// A stack of num_layers deep copies of `encoder_layer` (children layers.0, layers.1, ...: the
// given layer itself is not part of the stack), then the optional final `norm`.
// forward(src, mask, src_key_padding_mask, is_causal): every layer gets the same masks.
class TransformerEncoderImpl : public Module {
 public:
  TransformerEncoderImpl(const TransformerEncoderLayer& encoder_layer, int64_t num_layers, const LayerNorm& norm = nullptr);
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {}, bool is_causal = false) const;

  int64_t num_layers;
  ModuleList layers{nullptr};
  LayerNorm norm{nullptr};
};
using TransformerEncoder = ModuleHolder<TransformerEncoderImpl>;

// A stack of num_layers deep copies of `decoder_layer`, then the optional final `norm`.
class TransformerDecoderImpl : public Module {
 public:
  TransformerDecoderImpl(const TransformerDecoderLayer& decoder_layer, int64_t num_layers, const LayerNorm& norm = nullptr);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false) const;

  int64_t num_layers;
  ModuleList layers{nullptr};
  LayerNorm norm{nullptr};
};
using TransformerDecoder = ModuleHolder<TransformerDecoderImpl>;

struct TransformerOptions {
  TransformerOptions(int64_t d_model = 512, int64_t nhead = 8) : layer_(d_model, nhead) {}  // NOLINT
  TransformerOptions& num_encoder_layers(int64_t v) {
    num_encoder_layers_ = v;
    return *this;
  }
  TransformerOptions& num_decoder_layers(int64_t v) {
    num_decoder_layers_ = v;
    return *this;
  }
  TransformerOptions& dim_feedforward(int64_t v) {
    layer_.dim_feedforward(v);
    return *this;
  }
  TransformerOptions& dropout(double p) {
    layer_.dropout(p);
    return *this;
  }
  TransformerOptions& activation(std::string name) {
    layer_.activation(std::move(name));
    return *this;
  }
  TransformerOptions& activation(TransformerActivation fn) {
    layer_.activation(std::move(fn));
    return *this;
  }
  TransformerOptions& layer_norm_eps(double v) {
    layer_.layer_norm_eps(v);
    return *this;
  }
  TransformerOptions& batch_first(bool b) {
    layer_.batch_first(b);
    return *this;
  }
  TransformerOptions& norm_first(bool b) {
    layer_.norm_first(b);
    return *this;
  }
  int64_t d_model() const { return layer_.d_model(); }
  int64_t nhead() const { return layer_.nhead(); }
  int64_t num_encoder_layers() const { return num_encoder_layers_; }
  int64_t num_decoder_layers() const { return num_decoder_layers_; }
  // The options every encoder and decoder layer is built with.
  const TransformerLayerOptions& layer_options() const { return layer_; }

 private:
  TransformerLayerOptions layer_;
  int64_t num_encoder_layers_ = 6;
  int64_t num_decoder_layers_ = 6;
};

// torch.nn.Transformer: encoder (num_encoder_layers, final LayerNorm) and decoder
// (num_decoder_layers, final LayerNorm); after construction every parameter with more than one
// dimension is re-initialised with xavier_uniform_. forward(src [S, N, E], tgt [T, N, E] (or
// batch-first / unbatched), src_mask [S, S], tgt_mask [T, T], memory_mask [T, S],
// src_key_padding_mask [N, S], tgt_key_padding_mask [N, T], memory_key_padding_mask [N, S],
// src_is_causal, tgt_is_causal, memory_is_causal) -> [T, N, E]: decoder(tgt, encoder(src)).
class TransformerImpl : public Module {
 public:
  explicit TransformerImpl(const TransformerOptions& options = {});
  void reset_parameters();
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& src_key_padding_mask = {}, const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool src_is_causal = false, bool tgt_is_causal = false, bool memory_is_causal = false) const;
  // The causal mask [sz, sz]: -inf above the diagonal, 0 elsewhere (float32 unless opts says).
  static Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions opts = {});

  TransformerOptions options;
  TransformerEncoder encoder{nullptr};
  TransformerDecoder decoder{nullptr};
};

// The same as TransformerImpl::generate_square_subsequent_mask (torch.nn.Transformer's static method).
Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions opts = {});

// The holder, with the static mask factory reachable as nn::Transformer::generate_square_subsequent_mask.
class Transformer : public ModuleHolder<TransformerImpl> {
 public:
  using ModuleHolder<TransformerImpl>::ModuleHolder;
  static Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions opts = {}) {
    return TransformerImpl::generate_square_subsequent_mask(sz, opts);
  }
};

}  // namespace dp::nn
