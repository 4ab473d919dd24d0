// The Transformer layers against PyTorch 1.13 (tests/golden/gen_transformer.py): encoder and
// decoder layers (post-/pre-norm, relu/gelu/callable, masks, unbatched), the stacks with and
// without a final norm, nn::Transformer; outputs in eval mode (dropout on) and in train mode with
// dropout 0, and the gradients of a fixed loss w.r.t. the inputs and every parameter, float32 and
// float64; names, shapes and printing; the causal mask; initialisation; deep copies; DataParallel
// on two CPU devices against one; error messages.
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include <map>
#include "dp/nn/modules/transformer.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/reduction.h"
#include "dp/parallel/data_parallel.h"
#include "support/devices.h"
#include "support/golden.h"

namespace dp::nn {
namespace {

using test::all_close;
using test::golden_case;
using test::json;
using test::tensor_from_json;

constexpr const char* kFile = "transformer.json";

DType dtype_of_config(const json& cfg) { return cfg.at("dtype") == "float64" ? kFloat64 : kFloat32; }
double rtol_for(DType dt) { return dt == kFloat64 ? 1e-9 : 2e-4; }
double atol_for(DType dt) { return dt == kFloat64 ? 1e-11 : 5e-5; }

TransformerLayerOptions layer_options_from(const json& cfg) {
  TransformerLayerOptions o(cfg.at("d_model").get<int64_t>(), cfg.at("nhead").get<int64_t>());
  o.dim_feedforward(cfg.at("dim_feedforward").get<int64_t>())
      .dropout(cfg.at("dropout").get<double>())
      .layer_norm_eps(cfg.at("layer_norm_eps").get<double>())
      .batch_first(cfg.at("batch_first").get<bool>())
      .norm_first(cfg.at("norm_first").get<bool>());
  const std::string act = cfg.at("activation");
  if (act == "sigmoid_callable") {
    o.activation([](const Tensor& x) { return sigmoid(x); });
  } else {
    o.activation(act);
  }
  return o;
}

// The module of a case, with PyTorch's weights and mode.
std::shared_ptr<Module> build(const json& c) {
  const json& cfg = c.at("config");
  const std::string kind = c.at("kind");
  const TransformerLayerOptions lo = layer_options_from(cfg);
  std::shared_ptr<Module> m;
  if (kind == "encoder_layer") m = TransformerEncoderLayer(lo).ptr();
  if (kind == "decoder_layer") m = TransformerDecoderLayer(lo).ptr();
  if (kind == "encoder")
    m = TransformerEncoder(TransformerEncoderLayer(lo), cfg.at("num_layers").get<int64_t>(),
                           cfg.at("norm").get<bool>() ? LayerNorm(std::vector<int64_t>{lo.d_model()}) : nullptr)
            .ptr();
  if (kind == "decoder")
    m = TransformerDecoder(TransformerDecoderLayer(lo), cfg.at("num_layers").get<int64_t>(),
                           cfg.at("norm").get<bool>() ? LayerNorm(std::vector<int64_t>{lo.d_model()}) : nullptr)
            .ptr();
  if (kind == "transformer") {
    TransformerOptions to(lo.d_model(), lo.nhead());
    to.num_encoder_layers(cfg.at("num_encoder_layers").get<int64_t>())
        .num_decoder_layers(cfg.at("num_decoder_layers").get<int64_t>())
        .dim_feedforward(lo.dim_feedforward())
        .dropout(lo.dropout())
        .activation(lo.activation_name())
        .layer_norm_eps(lo.layer_norm_eps())
        .batch_first(lo.batch_first())
        .norm_first(lo.norm_first());
    m = Transformer(to).ptr();
  }
  EXPECT_NE(m, nullptr) << kind;
  m->to(dtype_of_config(cfg));
  m->train(c.at("train").get<bool>());
  test::load_named_parameters(*m, c.at("params"));
  return m;
}

Tensor mask_of(const json& c, const char* name) { return c.at("masks").contains(name) ? tensor_from_json(c.at("masks").at(name)) : Tensor(); }

void check_case(const std::string& name) {
  SCOPED_TRACE(name);
  const json& c = golden_case(kFile, name);
  const DType dt = dtype_of_config(c.at("config"));
  const double rtol = rtol_for(dt), atol = atol_for(dt);
  std::shared_ptr<Module> m = build(c);
  const std::string kind = c.at("kind");
  std::map<std::string, Tensor> in;
  for (const auto& [k, v] : c.at("inputs").items()) in[k] = tensor_from_json(v, true);
  Tensor out;
  if (kind == "encoder_layer") {
    out = call(dynamic_cast<TransformerEncoderLayerImpl&>(*m), in["src"], mask_of(c, "src_mask"), mask_of(c, "src_key_padding_mask"));
  } else if (kind == "decoder_layer") {
    out = call(dynamic_cast<TransformerDecoderLayerImpl&>(*m), in["tgt"], in["memory"], mask_of(c, "tgt_mask"), mask_of(c, "memory_mask"),
               mask_of(c, "tgt_key_padding_mask"), mask_of(c, "memory_key_padding_mask"));
  } else if (kind == "encoder") {
    out = call(dynamic_cast<TransformerEncoderImpl&>(*m), in["src"], mask_of(c, "mask"), mask_of(c, "src_key_padding_mask"));
  } else if (kind == "decoder") {
    out = call(dynamic_cast<TransformerDecoderImpl&>(*m), in["tgt"], in["memory"], mask_of(c, "tgt_mask"), mask_of(c, "memory_mask"),
               mask_of(c, "tgt_key_padding_mask"), mask_of(c, "memory_key_padding_mask"));
  } else {
    out = call(dynamic_cast<TransformerImpl&>(*m), in["src"], in["tgt"], mask_of(c, "src_mask"), mask_of(c, "tgt_mask"), mask_of(c, "memory_mask"),
               mask_of(c, "src_key_padding_mask"), mask_of(c, "tgt_key_padding_mask"), mask_of(c, "memory_key_padding_mask"));
  }
  EXPECT_EQ(out.dtype(), dt);
  EXPECT_TRUE(all_close(out, c.at("output"), rtol, atol)) << "output";
  sum(mul(out, tensor_from_json(c.at("r_out")))).backward();
  const json& g = c.at("grads");
  for (auto& [k, t] : in) EXPECT_TRUE(all_close(t.grad(), g.at(k), rtol, atol)) << "grad " << k;
  for (const auto& item : m->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(all_close(item.value().grad(), g.at(item.key()), rtol, atol)) << "grad " << item.key();
  }
}

TEST(TransformerGolden, EncoderLayer) {
  for (const char* n :
       {"enc_post_relu", "enc_pre_gelu_batch_first", "enc_train_dropout0", "enc_pre_train_f64", "enc_unbatched", "enc_callable_activation"})
    check_case(n);
}
TEST(TransformerGolden, DecoderLayer) {
  for (const char* n : {"dec_post_relu", "dec_pre_gelu_batch_first", "dec_train_dropout0_f64", "dec_unbatched"}) check_case(n);
}
TEST(TransformerGolden, Stacks) {
  for (const char* n : {"encoder_norm", "encoder_no_norm_pre_f64", "decoder_norm", "decoder_no_norm_train"}) check_case(n);
}
TEST(TransformerGolden, Transformer) {
  check_case("transformer");
  check_case("transformer_pre_gelu_f64");
}

TEST(TransformerGolden, IsCausalHintGivesTheSameResult) {
  // The encoder case's src_mask is the causal mask, and it has a key padding mask; without it the
  // hint lets attention build the causal mask itself: same output as passing the mask.
  const json& c = golden_case(kFile, "enc_train_dropout0");
  std::shared_ptr<Module> m = build(c);
  auto& layer = dynamic_cast<TransformerEncoderLayerImpl&>(*m);
  Tensor src = tensor_from_json(c.at("inputs").at("src"));
  Tensor mask = mask_of(c, "src_mask");
  Tensor with_hint = layer.forward(src, mask, Tensor(), /*is_causal=*/true);
  EXPECT_TRUE(all_close(with_hint, c.at("output"), 2e-4, 5e-5));
  EXPECT_TRUE(all_close(with_hint, layer.forward(src, mask), 1e-6, 1e-6));
}

TEST(TransformerGolden, TrainingModeDropsOut) {
  // Same weights as an eval-mode case; in training the default dropout (0.1) changes the output,
  // and the same seed gives the same draw.
  const json& c = golden_case(kFile, "enc_post_relu");
  std::shared_ptr<Module> m = build(c);
  auto& layer = dynamic_cast<TransformerEncoderLayerImpl&>(*m);
  Tensor src = tensor_from_json(c.at("inputs").at("src"));
  layer.train();
  manual_seed(7);
  Tensor a = layer.forward(src);
  manual_seed(7);
  Tensor b = layer.forward(src);
  EXPECT_TRUE(equal(a, b));
  layer.eval();
  EXPECT_FALSE(allclose(a, layer.forward(src), 1e-4, 1e-5));
}

// ---------------------------------------------------------------- names, shapes, printing

void check_meta(const std::string& name, const Module& m) {
  SCOPED_TRACE(name);
  const json& c = golden_case(kFile, name);
  TensorDict sd = m.state_dict();
  EXPECT_EQ(sd.keys(), c.at("keys").get<std::vector<std::string>>());
  ASSERT_EQ(sd.size(), c.at("shapes").size());
  size_t i = 0;
  for (const auto& item : sd) EXPECT_EQ(item.value().sizes(), c.at("shapes")[i++].get<Shape>()) << item.key();
  EXPECT_EQ(m.to_string(), c.at("repr").get<std::string>());
}

TEST(TransformerMeta, NamesShapesAndPrinting) {
  check_meta(
      "meta_encoder_layer",
      *TransformerEncoderLayer(TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).activation("gelu").layer_norm_eps(1e-6).norm_first(true)));
  check_meta("meta_decoder_layer", *TransformerDecoderLayer(TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).batch_first(true)));
  check_meta("meta_encoder", *TransformerEncoder(TransformerEncoderLayer(TransformerEncoderLayerOptions(8, 2).dim_feedforward(16)), 2,
                                                 LayerNorm(std::vector<int64_t>{8})));
  check_meta("meta_decoder", *TransformerDecoder(TransformerDecoderLayer(TransformerDecoderLayerOptions(8, 2).dim_feedforward(16)), 2));
  check_meta("meta_transformer", *Transformer(TransformerOptions(8, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(16).dropout(0.2)));
}

TEST(TransformerMeta, DefaultsArePyTorchs) {
  TransformerEncoderLayerOptions o(512, 8);
  EXPECT_EQ(o.dim_feedforward(), 2048);
  EXPECT_EQ(o.dropout(), 0.1);
  EXPECT_EQ(o.activation_name(), "relu");
  EXPECT_EQ(o.layer_norm_eps(), 1e-5);
  EXPECT_FALSE(o.batch_first());
  EXPECT_FALSE(o.norm_first());
  TransformerOptions t;
  EXPECT_EQ(t.d_model(), 512);
  EXPECT_EQ(t.nhead(), 8);
  EXPECT_EQ(t.num_encoder_layers(), 6);
  EXPECT_EQ(t.num_decoder_layers(), 6);
}

TEST(TransformerMask, SquareSubsequentMask) {
  const json& c = golden_case(kFile, "square_subsequent_mask_4");
  Tensor m = Transformer::generate_square_subsequent_mask(4);
  EXPECT_EQ(m.dtype(), kFloat32);
  EXPECT_TRUE(all_close(m, c.at("value"), 0, 0));
  EXPECT_TRUE(equal(generate_square_subsequent_mask(4), m));
  EXPECT_TRUE(equal(TransformerImpl::generate_square_subsequent_mask(4), m));
  Tensor m64 = generate_square_subsequent_mask(3, kFloat64);
  EXPECT_EQ(m64.dtype(), kFloat64);
  EXPECT_EQ(m64.to_vector<double>()[1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(m64.to_vector<double>()[3], 0.0);
  EXPECT_EQ(generate_square_subsequent_mask(0).numel(), 0);
}

// ---------------------------------------------------------------- construction

double max_abs(const Tensor& t) { return abs(t).max().item<double>(); }

TEST(TransformerInit, EveryMatrixIsXavierUniform) {
  manual_seed(11);
  Transformer t(TransformerOptions(32, 4).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(64));
  for (const auto& item : t->named_parameters()) {
    SCOPED_TRACE(item.key());
    const Tensor& p = item.value();
    if (p.dim() > 1) {
      const double bound = std::sqrt(6.0 / double(p.size(0) + p.size(1)));
      EXPECT_LE(max_abs(p), bound);
      EXPECT_GT(max_abs(p), 0.9 * bound);
    }
  }
  // Vectors keep their own init: zero attention biases, LayerNorm ones and zeros.
  auto enc = t->encoder->layers->ptr<TransformerEncoderLayerImpl>(0);
  EXPECT_EQ(max_abs(enc->self_attn->in_proj_bias), 0.0);
  EXPECT_TRUE(equal(enc->norm1->weight, ones({32})));
  EXPECT_TRUE(equal(t->decoder->norm->bias, zeros({32})));
}

TEST(TransformerStacks, LayersAreDeepCopies) {
  TransformerEncoderLayer proto(TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
  TransformerEncoder enc(proto, 3);
  ASSERT_EQ(enc->layers->size(), 3u);
  EXPECT_TRUE(enc->norm.is_empty());
  std::vector<std::string> keys = enc->state_dict().keys();
  EXPECT_EQ(keys.front(), "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(keys.back(), "layers.2.norm2.bias");
  auto l0 = enc->layers->ptr<TransformerEncoderLayerImpl>(0), l2 = enc->layers->ptr<TransformerEncoderLayerImpl>(2);
  EXPECT_FALSE(l0->linear1->weight.is_same(proto->linear1->weight));
  EXPECT_FALSE(l0->linear1->weight.is_same(l2->linear1->weight));
  EXPECT_TRUE(equal(l0->linear1->weight, proto->linear1->weight));
  // The copies' members point at their own children.
  EXPECT_TRUE(l2->self_attn->in_proj_weight.is_same(l2->named_parameters()["self_attn.in_proj_weight"]));
  EXPECT_EQ(enc->parameters().size(), 3 * proto->parameters().size());
  // A clone of the whole stack is deep too.
  auto copy = nn::clone(enc.ptr());
  EXPECT_FALSE(
      copy->layers->ptr<TransformerEncoderLayerImpl>(1)->linear2->weight.is_same(enc->layers->ptr<TransformerEncoderLayerImpl>(1)->linear2->weight));
  EXPECT_EQ(copy->to_string(), enc->to_string());
}

TEST(TransformerStacks, CallableActivationSurvivesClone) {
  int calls = 0;
  TransformerEncoderLayer layer(TransformerEncoderLayerOptions(4, 2).dim_feedforward(8).activation([&calls](const Tensor& x) {
    ++calls;
    return tanh(x);
  }));
  TransformerEncoder enc(layer, 2);
  enc->eval();
  enc(randn({3, 2, 4}));
  EXPECT_EQ(calls, 2);
}

TEST(TransformerDocs, SequenceModelsExampleRuns) {
  // docs/sequence-models.md, section 3, with smaller sizes.
  TransformerEncoder encoder(TransformerEncoderLayer(TransformerEncoderLayerOptions(16, 4).dim_feedforward(32).batch_first(true)),
                             /*num_layers=*/2, LayerNorm(std::vector<int64_t>{16}));
  Tensor x = randn({3, 6, 16});
  Tensor causal = generate_square_subsequent_mask(6);
  Tensor padding = zeros({3, 6}, kBool);
  Tensor y = encoder(x, causal, padding);
  EXPECT_EQ(y.sizes(), Shape({3, 6, 16}));
  MultiheadAttention attn(MultiheadAttentionOptions(16, 4).batch_first(true));
  auto [out, weights] = attn(x, x, x, Tensor(), /*need_weights=*/true, causal);
  EXPECT_EQ(out.sizes(), Shape({3, 6, 16}));
  ASSERT_EQ(weights.sizes(), Shape({3, 6, 6}));
  // Causal: no weight above the diagonal; rows sum to one.
  EXPECT_EQ(weights.select(1, 0).select(1, 1).abs().max().item<double>(), 0.0);
  EXPECT_TRUE(allclose(weights.sum(-1), ones({3, 6}), 1e-5, 1e-6));
}

// ---------------------------------------------------------------- DataParallel

class TransformerDataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(2); }
};

void expect_same_grads(const Module& a, const Module& b) {
  TensorDict ga = a.named_parameters(), gb = b.named_parameters();
  ASSERT_EQ(ga.keys(), gb.keys());
  for (const auto& item : ga) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(allclose(item.value().grad().cpu(), gb[item.key()].grad(), 1e-4, 1e-5)) << item.key();
  }
}

TEST_F(TransformerDataParallel, BatchFirstEncoderOnTwoDevicesEqualsOne) {
  manual_seed(1);
  auto enc = TransformerEncoder(TransformerEncoderLayer(TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).batch_first(true)), 2,
                                LayerNorm(std::vector<int64_t>{8}))
                 .ptr();
  auto reference = nn::clone(enc);
  enc->to("cpu:0");
  DataParallel<TransformerEncoderImpl> net(enc, test::cpu_devices(2));
  Tensor src = randn({4, 5, 8}), kpm = zeros({4, 5}, kBool);
  {
    NoGradGuard g;
    kpm.select(0, 1).narrow(0, 3, 2).fill_(true);
    kpm.select(0, 3).narrow(0, 4, 1).fill_(true);
  }
  Tensor x = src.clone().requires_grad_(true), x_ref = src.clone().requires_grad_(true);
  Tensor y = net(x, Tensor(), kpm);
  Tensor y_ref = reference->forward(x_ref, Tensor(), kpm);
  ASSERT_EQ(y.sizes(), Shape({4, 5, 8}));
  EXPECT_TRUE(allclose(y.cpu(), y_ref, 1e-5, 1e-6));
  Tensor r = randn({4, 5, 8});
  sum(mul(y, r.to("cpu:0"))).backward();
  sum(mul(y_ref, r)).backward();
  EXPECT_TRUE(allclose(x.grad().cpu(), x_ref.grad(), 1e-4, 1e-5));
  expect_same_grads(*enc, *reference);
}

// A decoder-only block with its causal mask built inside forward (a mask passed as an argument
// would be split over the devices): sequence-first, so DataParallel splits along dim 1.
struct CausalBlock : Module {
  TransformerEncoder enc{nullptr};
  CausalBlock() {
    enc =
        register_module("enc", TransformerEncoder(TransformerEncoderLayer(TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0)), 1));
  }
  Tensor forward(const Tensor& x) {
    Tensor mask = generate_square_subsequent_mask(x.size(0), TensorOptions(x.dtype()).device(x.device()));
    return enc(x, mask, Tensor(), /*is_causal=*/true);
  }
};

TEST_F(TransformerDataParallel, SequenceFirstAlongDimOne) {
  manual_seed(2);
  auto block = std::make_shared<CausalBlock>();
  auto reference = nn::clone(block);
  block->to("cpu:0");
  DataParallel<CausalBlock> net(block, parallel::DataParallelOptions(test::cpu_devices(2)).dim(1));
  Tensor src = randn({5, 4, 8});
  Tensor x = src.clone().requires_grad_(true), x_ref = src.clone().requires_grad_(true);
  Tensor y = net(x), y_ref = reference->forward(x_ref);
  ASSERT_EQ(y.sizes(), Shape({5, 4, 8}));
  EXPECT_TRUE(allclose(y.cpu(), y_ref, 1e-5, 1e-6));
  sum(mul(y, y)).backward();
  sum(mul(y_ref, y_ref)).backward();
  EXPECT_TRUE(allclose(x.grad().cpu(), x_ref.grad(), 1e-4, 1e-5));
  expect_same_grads(*block, *reference);
}

// ---------------------------------------------------------------- errors

template <typename E, typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

TEST(TransformerErrors, NameTheProblem) {
  expect_error<ValueError>([] { TransformerEncoderLayer(TransformerEncoderLayerOptions(8, 2).activation("tanh")); },
                           "TransformerEncoderLayer: activation should be relu/gelu, not tanh");
  expect_error<ValueError>([] { TransformerDecoderLayer(TransformerDecoderLayerOptions(8, 2).activation("swish")); },
                           "TransformerDecoderLayer: activation should be relu/gelu, not swish");
  expect_error<ValueError>([] { TransformerEncoderLayer(10, 4); }, "d_model must be divisible by nhead (d_model=10, nhead=4)");
  expect_error<ValueError>([] { TransformerEncoder(TransformerEncoderLayer(8, 2), 0); }, "TransformerEncoder: num_layers must be at least 1, got 0");
  expect_error<ValueError>([] { TransformerDecoder(TransformerDecoderLayer(nullptr), 2); },
                           "TransformerDecoder: decoder_layer is an empty module holder");
  Transformer t(TransformerOptions(8, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(16));
  expect_error<ShapeError>([&] { t(randn({5, 2, 8}), randn({4, 3, 8})); }, "the batch number of src and tgt must be equal");
  expect_error<ShapeError>([&] { t(randn({5, 2, 8}), randn({4, 2, 6})); }, "the feature number of src and tgt must be equal to d_model (8)");
  // Mask problems surface from the attention with the mask named.
  TransformerEncoderLayer layer(TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
  expect_error<ShapeError>([&] { layer(randn({5, 2, 8}), zeros({4, 4})); }, "the shape of the 2D attn_mask is [4, 4], but should be (5, 5)");
  expect_error<ShapeError>([&] { layer(randn({5, 2, 8}), Tensor(), zeros({2, 4}, kBool)); }, "expecting key_padding_mask shape of (2, 5)");
  expect_error<ValueError>([&] { layer(randn({5, 2, 8}), Tensor(), Tensor(), true); }, "need attn_mask if specifying the is_causal hint");
  expect_error<DTypeError>([] { generate_square_subsequent_mask(3, kInt64); }, "generate_square_subsequent_mask: the mask must be floating point");
}

}  // namespace
}  // namespace dp::nn
