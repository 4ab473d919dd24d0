// nn::MultiheadAttention against PyTorch 1.13 (tests/golden/gen_transformer.py): outputs, attention
// weights and the gradients of a fixed scalar loss w.r.t. the inputs and every parameter, with
// PyTorch's weights loaded by name, for every option and mask kind; parameter names, shapes and
// printing; initialisation; finite-difference gradients; error messages.
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include "dp/nn/modules/attention.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "support/gradcheck.h"
#include "support/golden.h"

namespace dp::nn {
namespace {

using test::all_close;
using test::golden_case;
using test::json;
using test::tensor_from_json;

constexpr const char* kFile = "transformer.json";

DType dtype_of_config(const json& cfg) { return cfg.at("dtype") == "float64" ? kFloat64 : kFloat32; }
double rtol_for(DType dt) { return dt == kFloat64 ? 1e-10 : 1e-4; }
double atol_for(DType dt) { return dt == kFloat64 ? 1e-12 : 2e-5; }

MultiheadAttentionOptions options_from(const json& cfg) {
  return MultiheadAttentionOptions(cfg.at("embed_dim").get<int64_t>(), cfg.at("num_heads").get<int64_t>())
      .bias(cfg.at("bias").get<bool>())
      .add_bias_kv(cfg.at("add_bias_kv").get<bool>())
      .add_zero_attn(cfg.at("add_zero_attn").get<bool>())
      .kdim(cfg.at("kdim").get<int64_t>())
      .vdim(cfg.at("vdim").get<int64_t>())
      .batch_first(cfg.at("batch_first").get<bool>())
      .dropout(cfg.at("dropout").get<double>());
}

Tensor mask_from(const json& c, const char* name) { return c.at("masks").contains(name) ? tensor_from_json(c.at("masks").at(name)) : Tensor(); }

struct Overrides {
  std::optional<bool> need_weights;
  bool is_causal = false;
};

// Runs the case (optionally with another need_weights / is_causal) and compares everything.
void check_mha_case(const std::string& name, Overrides ov = {}) {
  SCOPED_TRACE(name);
  const json& c = golden_case(kFile, name);
  const DType dt = dtype_of_config(c.at("config"));
  const double rtol = rtol_for(dt), atol = atol_for(dt);
  MultiheadAttention m(options_from(c.at("config")));
  m->to(dt);
  m->train(c.at("train").get<bool>());
  test::load_named_parameters(*m, c.at("params"));

  const json& in = c.at("inputs");
  const std::string mode = c.at("mode");
  Tensor q = tensor_from_json(in.at("query"), true), k, v;
  if (mode == "self") {
    k = v = q;
  } else if (mode == "kv") {
    k = v = tensor_from_json(in.at("key"), true);
  } else {
    k = tensor_from_json(in.at("key"), true);
    v = tensor_from_json(in.at("value"), true);
  }
  const bool need_weights = ov.need_weights.value_or(c.at("call").at("need_weights").get<bool>());
  auto [out, w] = m(q, k, v, mask_from(c, "key_padding_mask"), need_weights, mask_from(c, "attn_mask"),
                    c.at("call").at("average_attn_weights").get<bool>(), ov.is_causal);
  EXPECT_EQ(out.dtype(), dt);
  EXPECT_TRUE(all_close(out, c.at("output"), rtol, atol)) << "output";
  Tensor loss = sum(mul(out, tensor_from_json(c.at("r_out"))));
  if (!need_weights) {
    EXPECT_FALSE(w.defined()) << "need_weights = false returns no weights";
  } else if (c.contains("weights")) {
    EXPECT_TRUE(all_close(w, c.at("weights"), rtol, atol)) << "weights";
    loss = add(loss, sum(mul(w, tensor_from_json(c.at("r_w")))));
  }
  if (need_weights != c.at("call").at("need_weights").get<bool>()) return;  // the loss differs from PyTorch's
  loss.backward();
  const json& g = c.at("grads");
  EXPECT_TRUE(all_close(q.grad(), g.at("query"), rtol, atol)) << "grad query";
  if (mode == "kv") {
    EXPECT_TRUE(all_close(k.grad(), g.at("key"), rtol, atol)) << "grad key";
  }
  if (mode == "cross") {
    EXPECT_TRUE(all_close(k.grad(), g.at("key"), rtol, atol)) << "grad key";
    EXPECT_TRUE(all_close(v.grad(), g.at("value"), rtol, atol)) << "grad value";
  }
  for (const auto& item : m->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(all_close(item.value().grad(), g.at(item.key()), rtol, atol)) << "grad " << item.key();
  }
}

TEST(MultiheadAttentionGolden, SelfAttention) {
  check_mha_case("mha_self");
  check_mha_case("mha_self_batch_first_f64");
}
TEST(MultiheadAttentionGolden, CrossAttention) {
  check_mha_case("mha_cross");
  check_mha_case("mha_kv_same");
}
TEST(MultiheadAttentionGolden, KdimVdim) {
  check_mha_case("mha_kdim_vdim");
  check_mha_case("mha_kdim_vdim_f64");
}
TEST(MultiheadAttentionGolden, NoBias) { check_mha_case("mha_nobias"); }
TEST(MultiheadAttentionGolden, BiasKvAndZeroAttn) {
  check_mha_case("mha_bias_kv");
  check_mha_case("mha_zero_attn");
  check_mha_case("mha_bias_kv_zero_attn_masks");
}
TEST(MultiheadAttentionGolden, KeyPaddingMasks) {
  check_mha_case("mha_kpm_bool_heads");
  check_mha_case("mha_kpm_float");
}
TEST(MultiheadAttentionGolden, AttnMasks) {
  check_mha_case("mha_mask2d_bool");
  check_mha_case("mha_mask2d_float_kpm_bool");
  check_mha_case("mha_mask3d_bool_kpm_bool");
  check_mha_case("mha_mask3d_float");
  check_mha_case("mha_heads4_f64");
}
TEST(MultiheadAttentionGolden, NeedWeightsFalse) {
  check_mha_case("mha_no_weights");
  // The same cases through the other path: outputs agree.
  check_mha_case("mha_mask3d_bool_kpm_bool", {false, false});
  check_mha_case("mha_no_weights", {true, false});
}
TEST(MultiheadAttentionGolden, IsCausalHint) {
  // attn_mask is PyTorch's causal bool mask: with the hint and no key_padding_mask, need_weights =
  // false builds the causal mask itself; need_weights = true still uses attn_mask.
  check_mha_case("mha_mask2d_bool", {false, true});
  check_mha_case("mha_mask2d_bool", {std::nullopt, true});
  check_mha_case("mha_no_weights", {std::nullopt, true});
}
TEST(MultiheadAttentionGolden, Unbatched) {
  check_mha_case("mha_unbatched");
  check_mha_case("mha_unbatched_batch_first_self");
}
TEST(MultiheadAttentionGolden, DropoutIsOffInEval) { check_mha_case("mha_dropout_eval"); }

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

TEST(MultiheadAttentionMeta, NamesShapesAndPrinting) {
  check_meta("meta_mha", *MultiheadAttention(8, 2));
  check_meta("meta_mha_kdim_vdim", *MultiheadAttention(MultiheadAttentionOptions(8, 4).dropout(0.25).add_bias_kv(true).kdim(3).vdim(5)));
  check_meta("meta_mha_nobias", *MultiheadAttention(MultiheadAttentionOptions(6, 3).bias(false).add_zero_attn(true).batch_first(true)));
}

TEST(MultiheadAttentionMeta, PyTorchStateDictLoads) {
  const json& c = golden_case(kFile, "mha_kdim_vdim");
  TensorDict sd;
  for (const json& p : c.at("params")) sd.insert(p.at(0).get<std::string>(), tensor_from_json(p.at(1)));
  MultiheadAttention m(options_from(c.at("config")));
  m->load_state_dict(sd);
  EXPECT_TRUE(equal(m->k_proj_weight, sd["k_proj_weight"]));
  EXPECT_TRUE(equal(m->out_proj->weight, sd["out_proj.weight"]));
  EXPECT_FALSE(m->in_proj_weight.defined());
}

TEST(MultiheadAttentionMeta, CloneIsDeep) {
  MultiheadAttention m(MultiheadAttentionOptions(8, 2).add_bias_kv(true));
  auto copy = nn::clone(m.ptr());
  EXPECT_FALSE(copy->in_proj_weight.is_same(m->in_proj_weight));
  EXPECT_TRUE(copy->in_proj_weight.is_same(copy->named_parameters()["in_proj_weight"]));
  EXPECT_TRUE(copy->bias_k.is_same(copy->named_parameters()["bias_k"]));
  EXPECT_TRUE(copy->out_proj->weight.is_same(copy->named_parameters()["out_proj.weight"]));
  EXPECT_TRUE(equal(copy->in_proj_weight, m->in_proj_weight));
  EXPECT_EQ(copy->to_string(), m->to_string());
}

// ---------------------------------------------------------------- initialisation

double max_abs(const Tensor& t) { return abs(t).max().item<double>(); }

TEST(MultiheadAttentionInit, AsPyTorch) {
  manual_seed(3);
  const int64_t E = 64;
  MultiheadAttention m(MultiheadAttentionOptions(E, 4).add_bias_kv(true));
  // xavier_uniform_ on [3E, E]: bound sqrt(6 / (E + 3E)).
  const double bound = std::sqrt(6.0 / (4.0 * E));
  EXPECT_LE(max_abs(m->in_proj_weight), bound);
  EXPECT_GT(max_abs(m->in_proj_weight), 0.95 * bound);
  EXPECT_EQ(max_abs(m->in_proj_bias), 0.0);
  EXPECT_EQ(max_abs(m->out_proj->bias), 0.0);
  // out_proj.weight keeps Linear's U(+-1/sqrt(E)).
  EXPECT_LE(max_abs(m->out_proj->weight), 1.0 / std::sqrt(double(E)));
  EXPECT_GT(max_abs(m->out_proj->weight), 0.95 / std::sqrt(double(E)));
  // xavier_normal_ on [1, 1, E]: std sqrt(2 / (E + E)).
  Tensor both = cat({m->bias_k.flatten(), m->bias_v.flatten()});
  const double sd = std::sqrt(mean(mul(both, both)).item<double>()), want = std::sqrt(1.0 / E);
  EXPECT_NEAR(sd, want, 0.25 * want);

  MultiheadAttention sep(MultiheadAttentionOptions(E, 4).kdim(16).vdim(32).bias(false));
  EXPECT_LE(max_abs(sep->q_proj_weight), std::sqrt(6.0 / (2.0 * E)));
  EXPECT_GT(max_abs(sep->q_proj_weight), 0.95 * std::sqrt(6.0 / (2.0 * E)));
  EXPECT_LE(max_abs(sep->k_proj_weight), std::sqrt(6.0 / (E + 16.0)));
  EXPECT_LE(max_abs(sep->v_proj_weight), std::sqrt(6.0 / (E + 32.0)));
  EXPECT_FALSE(sep->in_proj_bias.defined());
  EXPECT_FALSE(sep->out_proj->bias.defined());
}

// ---------------------------------------------------------------- finite differences (float64)

TEST(MultiheadAttentionGrad, FiniteDifferences) {
  manual_seed(5);
  for (bool need_weights : {true, false}) {
    SCOPED_TRACE(need_weights ? "need_weights" : "no weights");
    MultiheadAttention m(MultiheadAttentionOptions(4, 2).kdim(3).vdim(2).add_bias_kv(true).add_zero_attn(true));
    m->to(kFloat64);
    Tensor kpm = tensor<double>({0, -1.5, 0, 0, 0, 0, 0.5, 0}, {2, 4}, kFloat64);
    Tensor mask = tensor<double>({0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0}, {3, 4}).to(kBool);
    // The module reads its own parameters: gradcheck's perturbed copies are copied into them.
    std::vector<Tensor> params = m->parameters();
    std::vector<Tensor> inputs = {test::rand_leaf({3, 2, 4}), test::rand_leaf({4, 2, 3}), test::rand_leaf({4, 2, 2})};
    inputs.insert(inputs.end(), params.begin(), params.end());
    auto f = [&](const std::vector<Tensor>& in) {
      {
        NoGradGuard g;
        for (size_t i = 0; i < params.size(); ++i)
          if (!in[3 + i].is_same(params[i])) params[i].copy_(in[3 + i]);
      }
      auto [out, w] = m->forward(in[0], in[1], in[2], kpm, need_weights, mask);
      return need_weights ? cat({out.flatten(), w.flatten()}) : out;
    };
    EXPECT_TRUE(test::gradcheck(f, inputs));
  }
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

TEST(MultiheadAttentionErrors, NameTheProblem) {
  expect_error<ValueError>([] { MultiheadAttention(10, 3); }, "embed_dim must be divisible by num_heads (embed_dim=10, num_heads=3)");
  expect_error<ValueError>([] { MultiheadAttention(MultiheadAttentionOptions(8, 2).dropout(1.5)); }, "dropout probability has to be between 0 and 1");
  MultiheadAttention m(8, 2);
  Tensor q = randn({4, 2, 8}), kv = randn({5, 2, 8});
  expect_error<ShapeError>([&] { m(randn({1, 4, 2, 8}), kv, kv); }, "query should be unbatched 2D or batched 3D tensor but received 4-D");
  expect_error<ShapeError>([&] { m(q, randn({5, 8}), randn({5, 8})); }, "expected key and value to be 3-D but found 2-D and 2-D");
  expect_error<ShapeError>([&] { m(randn({4, 2, 6}), kv, kv); }, "was expecting embedding dimension of 8, but got query of shape [4, 2, 6]");
  expect_error<ShapeError>([&] { m(q, randn({5, 2, 7}), kv); }, "expected key with 8 features (kdim), but got key of shape [5, 2, 7]");
  expect_error<ShapeError>([&] { m(q, kv, randn({6, 2, 8})); }, "key's sequence and batch dims do not match value's");
  expect_error<ShapeError>([&] { m(q, randn({5, 3, 8}), randn({5, 3, 8})); }, "query and key must have the same batch size");
  expect_error<ShapeError>([&] { m(q, kv, kv, zeros({2, 4}, kBool)); }, "expecting key_padding_mask shape of (2, 5), but got [2, 4]");
  expect_error<DTypeError>(
      [&] {
        m(q, kv, kv, zeros({2, 5}, kInt64));
      },
      "only bool and floating types of key_padding_mask are supported, got torch.int64");
  expect_error<ShapeError>(
      [&] {
        m(q, kv, kv, Tensor(), true, zeros({4, 4}, kBool));
      },
      "the shape of the 2D attn_mask is [4, 4], but should be (4, 5)");
  expect_error<ShapeError>(
      [&] {
        m(q, kv, kv, Tensor(), true, zeros({2, 4, 5}));
      },
      "the shape of the 3D attn_mask is [2, 4, 5], but should be (4, 4, 5)");
  expect_error<ShapeError>([&] { m(q, kv, kv, Tensor(), true, zeros({5})); }, "attn_mask's dimension 1 is not supported");
  expect_error<DTypeError>([&] { m(q, kv, kv, Tensor(), true, zeros({4, 5}, kInt32)); }, "only bool and floating types of attn_mask are supported");
  expect_error<ValueError>([&] { m(q, kv, kv, Tensor(), false, Tensor(), true, /*is_causal=*/true); },
                           "need attn_mask if specifying the is_causal hint");
  expect_error<DTypeError>([&] { m(q.to(kFloat64), kv, kv); }, "query must have the parameters' dtype torch.float32, got torch.float64");
  // Unbatched: key_padding_mask [S], a 3-D attn_mask [h, L, S].
  expect_error<ShapeError>([&] { m(randn({4, 8}), randn({5, 8}), randn({5, 8}), zeros({1, 5}, kBool)); }, "expecting key_padding_mask shape of (5,)");
  expect_error<ShapeError>(
      [&] {
        m(randn({4, 8}), randn({5, 8}), randn({5, 8}), Tensor(), true, zeros({4, 4, 5}));
      },
      "the shape of the 3D attn_mask is [4, 4, 5], but should be (2, 4, 5)");
}

}  // namespace
}  // namespace dp::nn
