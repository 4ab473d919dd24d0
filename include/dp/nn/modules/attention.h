#pragma once
// MultiheadAttention (torch.nn.MultiheadAttention): PyTorch's options, parameter names and layout
// (a PyTorch state_dict loads), masks, initialisation and printing.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include "dp/nn/module.h"
#include "dp/nn/modules/linear.h"

namespace dp::nn {

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  // Dropout on the attention weights, in training mode only.
  MultiheadAttentionOptions& dropout(double p) {
    dropout_ = p;
    return *this;
  }
  // Biases of the input and output projections.
  MultiheadAttentionOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
  // A learned key and value (bias_k, bias_v [1, 1, E]) appended as one more source position.
  MultiheadAttentionOptions& add_bias_kv(bool b) {
    add_bias_kv_ = b;
    return *this;
  }
  // A zero key and value appended (after bias_k/bias_v) as one more source position.
  MultiheadAttentionOptions& add_zero_attn(bool b) {
    add_zero_attn_ = b;
    return *this;
  }
  // Feature sizes of key and value (default: embed_dim).
  MultiheadAttentionOptions& kdim(int64_t d) {
    kdim_ = d;
    return *this;
  }
  MultiheadAttentionOptions& vdim(int64_t d) {
    vdim_ = d;
    return *this;
  }
  // Inputs and output [N, L, E] instead of [L, N, E].
  MultiheadAttentionOptions& batch_first(bool b) {
    batch_first_ = b;
    return *this;
  }
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  double dropout() const { return dropout_; }
  bool bias() const { return bias_; }
  bool add_bias_kv() const { return add_bias_kv_; }
  bool add_zero_attn() const { return add_zero_attn_; }
  int64_t kdim() const { return kdim_.value_or(embed_dim_); }
  int64_t vdim() const { return vdim_.value_or(embed_dim_); }
  bool batch_first() const { return batch_first_; }

 private:
  int64_t embed_dim_;
  int64_t num_heads_;
  double dropout_ = 0.0;
  bool bias_ = true;
  bool add_bias_kv_ = false;
  bool add_zero_attn_ = false;
  std::optional<int64_t> kdim_;
  std::optional<int64_t> vdim_;
  bool batch_first_ = false;
};

// PyTorch's out_proj class: a Linear that prints under its own name.
class NonDynamicallyQuantizableLinearImpl : public LinearImpl {
 public:
  using LinearImpl::LinearImpl;
};
using NonDynamicallyQuantizableLinear = ModuleHolder<NonDynamicallyQuantizableLinearImpl>;

// Multi-head attention, "Attention Is All You Need": out = concat(head_1..head_h) W_o + b_o with
// head_i = softmax(q_i k_i^T / sqrt(head_dim) + mask) v_i, where q, k, v are the projected inputs.
//
//   forward(query [L, N, E], key [S, N, kdim], value [S, N, vdim]   ([N, L, E] ... with batch_first;
//           unbatched [L, E], [S, kdim], [S, vdim]),
//           key_padding_mask [N, S] (unbatched [S]), need_weights, attn_mask [L, S] or [N*h, L, S]
//           (unbatched also [h, L, S]), average_attn_weights, is_causal)
//     -> (output like query, weights [N, L, S] (averaged over heads) or [N, h, L, S], unbatched
//        without N; undefined when need_weights is false)
//
// Masks as PyTorch's: a bool mask is True where attention is NOT allowed (the opposite of
// scaled_dot_product_attention's bool mask); a floating mask is added to the scores (-inf blocks).
// Row n*h + i of a 3-D attn_mask is head i of batch entry n. key_padding_mask and attn_mask may
// mix bool and float. is_causal is a hint that attn_mask is the causal mask (an attn_mask is then
// required, as in PyTorch); without key_padding_mask and need_weights it lets attention skip the mask.
// add_bias_kv and add_zero_attn add source positions (S + 1 or S + 2 in the weights) that no
// mask blocks. A row whose keys are all blocked gives NaN, as PyTorch's MultiheadAttention does.
// need_weights = false runs attention without materialising the averaged weights (PyTorch's
// scaled_dot_product_attention path); need_weights = true computes the explicit softmax.
//
// Parameters (state_dict order): in_proj_weight [3E, E] (rows q, k, v) when kdim == vdim == E,
// else q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]; in_proj_bias [3E]
// (bias); bias_k, bias_v [1, 1, E] (add_bias_kv); out_proj.weight [E, E], out_proj.bias [E].
// Init: xavier_uniform_ on the projection weights, zero biases, xavier_normal_ on bias_k/bias_v,
// out_proj.weight as Linear's. Under DataParallel the batch dimension is 0 with batch_first,
// else 1 (a 2-D attn_mask must not be split: build it inside the replica's forward).
class MultiheadAttentionImpl : public Module {
 public:
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads) : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  void reset_parameters();
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask = {},
                                     bool need_weights = true, const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false) const;

  MultiheadAttentionOptions options;
  int64_t head_dim;
  Tensor in_proj_weight;  // undefined when kdim or vdim differs from embed_dim
  Tensor q_proj_weight;   // defined only when kdim or vdim differs from embed_dim
  Tensor k_proj_weight;
  Tensor v_proj_weight;
  Tensor in_proj_bias;
  Tensor bias_k;
  Tensor bias_v;
  NonDynamicallyQuantizableLinear out_proj{nullptr};
};
using MultiheadAttention = ModuleHolder<MultiheadAttentionImpl>;

}  // namespace dp::nn
