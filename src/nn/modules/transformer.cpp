#include "dp/nn/modules/transformer.h"

#include <limits>
#include "dp/nn/init.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/index.h"

namespace dp::nn {
namespace {

// PyTorch's _get_activation_fn, or the user's function.
TransformerActivation activation_of(const TransformerLayerOptions& o, const char* layer) {
  if (o.activation_fn()) return o.activation_fn();
  if (o.activation_name() == "relu") return [](const Tensor& x) { return dp::relu(x); };
  if (o.activation_name() == "gelu") return [](const Tensor& x) { return dp::gelu(x); };
  DP_CHECK(false, ValueError, layer, ": activation should be relu/gelu, not ", o.activation_name());
  return {};
}

void check_layer_options(const TransformerLayerOptions& o, const char* layer) {
  DP_CHECK(o.d_model() > 0 && o.nhead() > 0, ValueError, layer, ": d_model and nhead must be positive, got d_model=", o.d_model(),
           ", nhead=", o.nhead());
  DP_CHECK(o.d_model() % o.nhead() == 0, ValueError, layer, ": d_model must be divisible by nhead (d_model=", o.d_model(), ", nhead=", o.nhead(),
           ")");
  DP_CHECK(o.dim_feedforward() > 0, ValueError, layer, ": dim_feedforward must be positive, got ", o.dim_feedforward());
}

MultiheadAttention make_attention(const TransformerLayerOptions& o) {
  return MultiheadAttention(MultiheadAttentionOptions(o.d_model(), o.nhead()).dropout(o.dropout()).batch_first(o.batch_first()));
}

LayerNorm make_norm(const TransformerLayerOptions& o) { return LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps())); }

void check_num_layers(int64_t n, const char* stack) { DP_CHECK(n >= 1, ValueError, stack, ": num_layers must be at least 1, got ", n); }

}  // namespace

// ------------------------------------------------------------------------ TransformerEncoderLayer

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& opts) : options(opts) {
  check_layer_options(options, "TransformerEncoderLayer");
  activation = activation_of(options, "TransformerEncoderLayer");
  const int64_t d = options.d_model(), ff = options.dim_feedforward();
  self_attn = register_module("self_attn", make_attention(options));
  linear1 = register_module("linear1", Linear(d, ff));
  dropout = register_module("dropout", Dropout(options.dropout()));
  linear2 = register_module("linear2", Linear(ff, d));
  norm1 = register_module("norm1", make_norm(options));
  norm2 = register_module("norm2", make_norm(options));
  dropout1 = register_module("dropout1", Dropout(options.dropout()));
  dropout2 = register_module("dropout2", Dropout(options.dropout()));
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask, bool is_causal) const {
  DP_CHECK(src.defined(), ValueError, "TransformerEncoderLayer: src is an undefined tensor");
  auto sa_block = [&](const Tensor& x) {
    return dropout1(std::get<0>(self_attn(x, x, x, src_key_padding_mask, /*need_weights=*/false, src_mask, true, is_causal)));
  };
  auto ff_block = [&](const Tensor& x) { return dropout2(linear2(dropout(activation(linear1(x))))); };
  Tensor x = src;
  if (options.norm_first()) {
    x = add(x, sa_block(norm1(x)));
    x = add(x, ff_block(norm2(x)));
  } else {
    x = norm1(add(x, sa_block(x)));
    x = norm2(add(x, ff_block(x)));
  }
  return x;
}

// ------------------------------------------------------------------------ TransformerDecoderLayer

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& opts) : options(opts) {
  check_layer_options(options, "TransformerDecoderLayer");
  activation = activation_of(options, "TransformerDecoderLayer");
  const int64_t d = options.d_model(), ff = options.dim_feedforward();
  self_attn = register_module("self_attn", make_attention(options));
  multihead_attn = register_module("multihead_attn", make_attention(options));
  linear1 = register_module("linear1", Linear(d, ff));
  dropout = register_module("dropout", Dropout(options.dropout()));
  linear2 = register_module("linear2", Linear(ff, d));
  norm1 = register_module("norm1", make_norm(options));
  norm2 = register_module("norm2", make_norm(options));
  norm3 = register_module("norm3", make_norm(options));
  dropout1 = register_module("dropout1", Dropout(options.dropout()));
  dropout2 = register_module("dropout2", Dropout(options.dropout()));
  dropout3 = register_module("dropout3", Dropout(options.dropout()));
}

Tensor TransformerDecoderLayerImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask, const Tensor& memory_mask,
                                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                            bool memory_is_causal) const {
  DP_CHECK(tgt.defined() && memory.defined(), ValueError, "TransformerDecoderLayer: tgt and memory must be defined tensors");
  auto sa_block = [&](const Tensor& x) {
    return dropout1(std::get<0>(self_attn(x, x, x, tgt_key_padding_mask, /*need_weights=*/false, tgt_mask, true, tgt_is_causal)));
  };
  auto mha_block = [&](const Tensor& x) {
    return dropout2(
        std::get<0>(multihead_attn(x, memory, memory, memory_key_padding_mask, /*need_weights=*/false, memory_mask, true, memory_is_causal)));
  };
  auto ff_block = [&](const Tensor& x) { return dropout3(linear2(dropout(activation(linear1(x))))); };
  Tensor x = tgt;
  if (options.norm_first()) {
    x = add(x, sa_block(norm1(x)));
    x = add(x, mha_block(norm2(x)));
    x = add(x, ff_block(norm3(x)));
  } else {
    x = norm1(add(x, sa_block(x)));
    x = norm2(add(x, mha_block(x)));
    x = norm3(add(x, ff_block(x)));
  }
  return x;
}

// ---------------------------------------------------------------------------------- the stacks

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderLayer& encoder_layer, int64_t layers_count, const LayerNorm& final_norm)
    : num_layers(layers_count) {
  DP_CHECK(!encoder_layer.is_empty(), ValueError, "TransformerEncoder: encoder_layer is an empty module holder");
  check_num_layers(num_layers, "TransformerEncoder");
  layers = register_module("layers", ModuleList());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(nn::clone(encoder_layer.ptr()));
  if (!final_norm.is_empty()) norm = register_module("norm", final_norm);
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask, bool is_causal) const {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i) x = call(*layers->ptr<TransformerEncoderLayerImpl>(i), x, mask, src_key_padding_mask, is_causal);
  return norm.is_empty() ? x : norm(x);
}

TransformerDecoderImpl::TransformerDecoderImpl(const TransformerDecoderLayer& decoder_layer, int64_t layers_count, const LayerNorm& final_norm)
    : num_layers(layers_count) {
  DP_CHECK(!decoder_layer.is_empty(), ValueError, "TransformerDecoder: decoder_layer is an empty module holder");
  check_num_layers(num_layers, "TransformerDecoder");
  layers = register_module("layers", ModuleList());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(nn::clone(decoder_layer.ptr()));
  if (!final_norm.is_empty()) norm = register_module("norm", final_norm);
}

Tensor TransformerDecoderImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask, const Tensor& memory_mask,
                                       const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                       bool memory_is_causal) const {
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i)
    x = call(*layers->ptr<TransformerDecoderLayerImpl>(i), x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
             tgt_is_causal, memory_is_causal);
  return norm.is_empty() ? x : norm(x);
}

// ---------------------------------------------------------------------------------- Transformer

TransformerImpl::TransformerImpl(const TransformerOptions& opts) : options(opts) {
  const TransformerLayerOptions& lo = options.layer_options();
  check_layer_options(lo, "Transformer");
  encoder = register_module("encoder", TransformerEncoder(TransformerEncoderLayer(lo), options.num_encoder_layers(), make_norm(lo)));
  decoder = register_module("decoder", TransformerDecoder(TransformerDecoderLayer(lo), options.num_decoder_layers(), make_norm(lo)));
  reset_parameters();
}

void TransformerImpl::reset_parameters() {
  for (Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor TransformerImpl::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask, const Tensor& memory_mask,
                                const Tensor& src_key_padding_mask, const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                                bool src_is_causal, bool tgt_is_causal, bool memory_is_causal) const {
  DP_CHECK(src.defined() && tgt.defined(), ValueError, "Transformer: src and tgt must be defined tensors");
  const bool batched = src.dim() == 3;
  const int64_t bdim = options.layer_options().batch_first() ? 0 : 1;
  DP_CHECK(!batched || (tgt.dim() == 3 && src.size(bdim) == tgt.size(bdim)), ShapeError,
           "Transformer: the batch number of src and tgt must be equal (src ", src.size_str(), ", tgt ", tgt.size_str(), ", batch dimension ", bdim,
           ")");
  DP_CHECK(src.dim() >= 1 && tgt.dim() >= 1 && src.size(-1) == options.d_model() && tgt.size(-1) == options.d_model(), ShapeError,
           "Transformer: the feature number of src and tgt must be equal to d_model (", options.d_model(), "), got src ", src.size_str(), " and tgt ",
           tgt.size_str());
  Tensor memory = encoder(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal);
}

Tensor TransformerImpl::generate_square_subsequent_mask(int64_t sz, TensorOptions opts) { return nn::generate_square_subsequent_mask(sz, opts); }

Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions opts) {
  DP_CHECK(sz >= 0, ValueError, "generate_square_subsequent_mask: sz must be non-negative, got ", sz);
  DP_CHECK(is_floating_point(opts.dtype_), DTypeError, "generate_square_subsequent_mask: the mask must be floating point, got ",
           dtype_name(opts.dtype_));
  const TensorOptions idx = TensorOptions(kInt64).device(opts.device_);
  Tensor above = gt(arange(sz, idx).unsqueeze(0), arange(sz, idx).unsqueeze(1));  // column j > row i
  return masked_fill(zeros({sz, sz}, opts.requires_grad(false)), above, -std::numeric_limits<double>::infinity());
}

}  // namespace dp::nn
