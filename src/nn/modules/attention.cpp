#include "dp/nn/modules/attention.h"

#include "dp/ops/attention.h"

#include <cmath>
#include <limits>
#include "dp/nn/init.h"
#include "dp/nn/modules/normalization.h"
#include "dp/ops/attention.h"
#include "dp/ops/dropout.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/linalg.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"

namespace dp::nn {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// "torch.float32", as Python prints a dtype.
std::string torch_dtype(DType t) { return std::string("torch.") + dtype_name(t); }

// PyTorch's shape tuple spelling: (2, 3).
std::string tuple_str(IntArrayRef s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// need_weights = false: attention without returning its weights, through the fused
// F::scaled_dot_product_attention (a floating mask; is_causal only without a mask), as PyTorch's
// MultiheadAttention does.
Tensor attention_no_weights(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p, bool is_causal) {
  return scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal);
}

// A bool mask (True = blocked) as an additive float mask of `dtype`; a floating one converted.
Tensor additive_mask(const Tensor& m, DType dtype) {
  if (m.dtype() == kBool) return masked_fill(zeros(m.sizes(), options_of(m).dtype(dtype)), m, kNegInf);
  return m.dtype() == dtype ? m : m.to(dtype);
}

// Appends `n` zero columns (positions no mask blocks) to the last dimension.
Tensor pad_columns(const Tensor& m, int64_t n) {
  if (n == 0) return m;
  Shape extra = m.sizes();
  extra.back() = n;
  return cat({m, zeros(extra, options_of(m))}, -1);
}

void check_mask_dtype(const char* name, const Tensor& m) {
  DP_CHECK(m.dtype() == kBool || is_floating_point(m.dtype()), DTypeError, "MultiheadAttention: only bool and floating types of ", name,
           " are supported, got ", torch_dtype(m.dtype()));
}

}  // namespace

MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& opts) : options(opts) {
  const int64_t E = options.embed_dim(), h = options.num_heads();
  DP_CHECK(E > 0, ValueError, "MultiheadAttention: embed_dim must be positive, got ", E);
  DP_CHECK(h > 0, ValueError, "MultiheadAttention: num_heads must be positive, got ", h);
  DP_CHECK(E % h == 0, ValueError, "MultiheadAttention: embed_dim must be divisible by num_heads (embed_dim=", E, ", num_heads=", h, ")");
  DP_CHECK(options.kdim() > 0 && options.vdim() > 0, ValueError, "MultiheadAttention: kdim and vdim must be positive, got kdim=", options.kdim(),
           ", vdim=", options.vdim());
  DP_CHECK(options.dropout() >= 0.0 && options.dropout() <= 1.0, ValueError,
           "MultiheadAttention: dropout probability has to be between 0 and 1, but got ", detail::python_float_repr(options.dropout()));
  head_dim = E / h;
  if (options.kdim() == E && options.vdim() == E) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
    register_parameter("q_proj_weight", Tensor());
    register_parameter("k_proj_weight", Tensor());
    register_parameter("v_proj_weight", Tensor());
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({E, E}));
    k_proj_weight = register_parameter("k_proj_weight", empty({E, options.kdim()}));
    v_proj_weight = register_parameter("v_proj_weight", empty({E, options.vdim()}));
    register_parameter("in_proj_weight", Tensor());
  }
  in_proj_bias = register_parameter("in_proj_bias", options.bias() ? empty({3 * E}) : Tensor());
  out_proj = register_module("out_proj", NonDynamicallyQuantizableLinear(LinearOptions(E, E).bias(options.bias())));
  if (options.add_bias_kv()) {
    bias_k = register_parameter("bias_k", empty({1, 1, E}));
    bias_v = register_parameter("bias_v", empty({1, 1, E}));
  }
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
  if (bias_k.defined()) init::xavier_normal_(bias_k);
  if (bias_v.defined()) init::xavier_normal_(bias_v);
}

std::tuple<Tensor, Tensor> MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                           const Tensor& key_padding_mask, bool need_weights, const Tensor& attn_mask,
                                                           bool average_attn_weights, bool is_causal) const {
  const int64_t E = options.embed_dim(), h = options.num_heads(), hd = head_dim;
  // ---- arguments, as PyTorch's _mha_shape_check and multi_head_attention_forward check them
  DP_CHECK(query.defined() && key.defined() && value.defined(), ValueError, "MultiheadAttention: query, key and value must be defined tensors");
  DP_CHECK(query.dim() == 2 || query.dim() == 3, ShapeError, "MultiheadAttention: query should be unbatched 2D or batched 3D tensor but received ",
           query.dim(), "-D query tensor of shape ", query.size_str());
  const bool batched = query.dim() == 3;
  DP_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), ShapeError, "MultiheadAttention: for ",
           batched ? "batched (3-D)" : "unbatched (2-D)", " query, expected key and value to be ", query.dim(), "-D but found ", key.dim(), "-D and ",
           value.dim(), "-D tensors (key ", key.size_str(), ", value ", value.size_str(), ")");
  const DType dt = out_proj->weight.dtype();
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"query", &query}, {"key", &key}, {"value", &value}}) {
    DP_CHECK(t->dtype() == dt, DTypeError, "MultiheadAttention: ", name, " must have the parameters' dtype ", torch_dtype(dt), ", got ",
             torch_dtype(t->dtype()));
    DP_CHECK(t->device() == query.device(), DeviceError, "MultiheadAttention: expected all tensors to be on the same device, but ", name, " is on ",
             t->device().str(), " and query on ", query.device().str());
  }
  DP_CHECK(query.size(-1) == E, ShapeError, "MultiheadAttention: was expecting embedding dimension of ", E, ", but got query of shape ",
           query.size_str());
  DP_CHECK(key.size(-1) == options.kdim(), ShapeError, "MultiheadAttention: expected key with ", options.kdim(),
           " features (kdim), but got key of shape ", key.size_str());
  DP_CHECK(value.size(-1) == options.vdim(), ShapeError, "MultiheadAttention: expected value with ", options.vdim(),
           " features (vdim), but got value of shape ", value.size_str());
  // From here on the layout is either batch-first [N, T, F] or sequence-first [T, N, F]; an
  // unbatched input becomes a batch of one, batch-first (batch_first is ignored for unbatched input).
  const bool bf = !batched || options.batch_first();
  const int64_t bdim = bf ? 0 : 1, tdim = bf ? 1 : 0;
  const Tensor q_in = batched ? query : query.unsqueeze(0);
  const Tensor k_in = batched ? key : key.unsqueeze(0);
  const Tensor v_in = batched ? value : value.unsqueeze(0);
  const int64_t N = q_in.size(bdim), L = q_in.size(tdim), S = k_in.size(tdim);
  DP_CHECK(k_in.size(tdim) == v_in.size(tdim) && k_in.size(bdim) == v_in.size(bdim), ShapeError,
           "MultiheadAttention: key's sequence and batch dims do not match value's (key ", key.size_str(), ", value ", value.size_str(), ")");
  DP_CHECK(k_in.size(bdim) == N, ShapeError, "MultiheadAttention: query and key must have the same batch size (query ", query.size_str(), ", key ",
           key.size_str(), ", batch dimension ", bdim, ")");
  if (key_padding_mask.defined()) {
    check_mask_dtype("key_padding_mask", key_padding_mask);
    const Shape want = batched ? Shape{N, S} : Shape{S};
    DP_CHECK(key_padding_mask.sizes() == want, ShapeError, "MultiheadAttention: expecting key_padding_mask shape of ", tuple_str(want), ", but got ",
             key_padding_mask.size_str());
    DP_CHECK(key_padding_mask.device() == query.device(), DeviceError, "MultiheadAttention: key_padding_mask is on ", key_padding_mask.device().str(),
             " but query on ", query.device().str());
  }
  if (attn_mask.defined()) {
    check_mask_dtype("attn_mask", attn_mask);
    DP_CHECK(attn_mask.dim() == 2 || attn_mask.dim() == 3, ShapeError, "MultiheadAttention: attn_mask's dimension ", attn_mask.dim(),
             " is not supported (expected 2-D or 3-D, got shape ", attn_mask.size_str(), ")");
    const Shape want = attn_mask.dim() == 2 ? Shape{L, S} : Shape{batched ? N * h : h, L, S};
    DP_CHECK(attn_mask.sizes() == want, ShapeError, "MultiheadAttention: the shape of the ", attn_mask.dim(), "D attn_mask is ", attn_mask.size_str(),
             ", but should be ", tuple_str(want));
    DP_CHECK(attn_mask.device() == query.device(), DeviceError, "MultiheadAttention: attn_mask is on ", attn_mask.device().str(), " but query on ",
             query.device().str());
  }
  DP_CHECK(!is_causal || attn_mask.defined(), ValueError,
           "MultiheadAttention: need attn_mask if specifying the is_causal hint (generate_square_subsequent_mask makes the causal mask)");

  // ---- in-projection: one GEMM for self-attention, two when key is value, else three
  const bool packed = in_proj_weight.defined();
  auto weight_rows = [&](int64_t i) {
    return packed ? in_proj_weight.narrow(0, i * E, E) : (i == 0 ? q_proj_weight : i == 1 ? k_proj_weight : v_proj_weight);
  };
  auto bias_rows = [&](int64_t i, int64_t n) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * E, n * E) : Tensor(); };
  Tensor q, k, v;
  if (packed && query.is_same(key) && key.is_same(value)) {
    std::vector<Tensor> qkv = linear(q_in, in_proj_weight, in_proj_bias).chunk(3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else if (packed && key.is_same(value)) {
    q = linear(q_in, weight_rows(0), bias_rows(0, 1));
    std::vector<Tensor> kv = linear(k_in, in_proj_weight.narrow(0, E, 2 * E), bias_rows(1, 2)).chunk(2, -1);
    k = kv[0], v = kv[1];
  } else {
    q = linear(q_in, weight_rows(0), bias_rows(0, 1));
    k = linear(k_in, weight_rows(1), bias_rows(1, 1));
    v = linear(v_in, weight_rows(2), bias_rows(2, 1));
  }
  if (bias_k.defined()) {  // one more source position
    Shape one = bf ? Shape{N, 1, E} : Shape{1, N, E};
    k = cat({k, bias_k.expand(one)}, tdim);
    v = cat({v, bias_v.expand(one)}, tdim);
  }
  // [N, h, T, hd] views of the projections.
  auto heads = [&](const Tensor& x) {
    Tensor x4 = x.reshape({x.size(0), x.size(1), h, hd});
    return bf ? x4.permute({0, 2, 1, 3}) : x4.permute({1, 2, 0, 3});
  };
  q = heads(q), k = heads(k), v = heads(v);
  if (options.add_zero_attn()) {
    Tensor z = zeros({N, h, 1, hd}, options_of(k));
    k = cat({k, z}, 2);
    v = cat({v, z}, 2);
  }
  const int64_t extra = (bias_k.defined() ? 1 : 0) + (options.add_zero_attn() ? 1 : 0);
  const int64_t S_all = S + extra;

  // ---- masks: additive float masks broadcast over [N, h, L, S_all]
  Tensor mask;
  const bool trust_causal = is_causal && !key_padding_mask.defined() && !need_weights;  // PyTorch drops attn_mask for SDPA's is_causal
  if (attn_mask.defined() && !trust_causal) {
    Tensor m = pad_columns(additive_mask(attn_mask, dt), extra);
    mask = attn_mask.dim() == 2 ? m.view({1, 1, L, S_all}) : m.reshape({batched ? N : 1, h, L, S_all});
  }
  if (key_padding_mask.defined()) {
    Tensor m = pad_columns(additive_mask(key_padding_mask, dt), extra).reshape({N, 1, 1, S_all});
    mask = mask.defined() ? add(mask, m) : m;
  }
  const double p = is_training() ? options.dropout() : 0.0;

  // ---- attention
  Tensor out, weights;
  if (!need_weights) {
    out = attention_no_weights(q, k, v, mask, p, trust_causal);
  } else {
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    Tensor scores = matmul(mul(q, scale), k.transpose(-2, -1));  // [N, h, L, S_all]
    if (mask.defined()) scores = add(scores, mask);
    weights = softmax(scores, -1);
    if (p > 0.0) weights = dropout(weights, p, true);
    out = matmul(weights, v);
    if (average_attn_weights) weights = mean(weights, {1});
    if (!batched) weights = weights.squeeze(0);
  }
  // [N, h, L, hd] -> the input's layout [N, L, E] or [L, N, E], then the output projection.
  out = (bf ? out.permute({0, 2, 1, 3}) : out.permute({2, 0, 1, 3})).reshape(bf ? Shape{N, L, E} : Shape{L, N, E});
  out = linear(out, out_proj->weight, out_proj->bias);
  if (!batched) out = out.squeeze(0);
  return {out, weights};
}

}  // namespace dp::nn
