// nn::RNN, nn::GRU, RNNCell, GRUCell and packed input to RNN, GRU and LSTM, against PyTorch
// (tests/golden/gen_rnn.py): outputs, final states and the gradients of a fixed scalar loss w.r.t.
// input, h0, c0 and every weight, with PyTorch's weights loaded by name; names, shapes, printing and
// error messages. Then the fused layer ops (gru_layer, rnn_layer, lstm_layer, padded and packed)
// against their composite form and finite differences (float64, first and second order).
#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <unordered_set>
#include "dp/autograd/autograd.h"
#include "dp/nn/modules/rnn.h"
#include "dp/nn/utils/rnn.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/reduction.h"
#include "dp/ops/rnn.h"
#include "dp/ops/shape.h"
#include "support/cuda.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using nn::PackedSequence;
using test::all_close;
using test::golden_case;
using test::gradcheck;
using test::json;
using test::tensor_from_json;

DType dtype_of_config(const json& cfg) { return cfg.at("dtype") == "float64" ? kFloat64 : kFloat32; }

// Tolerances: float32 kernels (vectorised tanh/exp, different summation order) vs PyTorch's.
double rtol_for(DType dt) { return dt == kFloat64 ? 1e-10 : 2e-4; }
double atol_for(DType dt) { return dt == kFloat64 ? 1e-12 : 2e-5; }

template <typename O>
O options_from(const json& cfg) {
  return O(cfg.at("input_size").get<int64_t>(), cfg.at("hidden_size").get<int64_t>())
      .num_layers(cfg.at("num_layers").get<int64_t>())
      .bias(cfg.at("bias").get<bool>())
      .batch_first(cfg.at("batch_first").get<bool>())
      .bidirectional(cfg.at("bidirectional").get<bool>())
      .dropout(cfg.at("dropout").get<double>());
}

// A module of the case's mode, and its forward on a tensor or a packed sequence.
struct AnyRnn {
  std::string mode;
  std::shared_ptr<nn::Module> module;

  explicit AnyRnn(const json& cfg) : mode(cfg.at("mode").get<std::string>()) {
    if (mode == "LSTM") {
      module = std::make_shared<nn::LSTMImpl>(options_from<nn::LSTMOptions>(cfg));
    } else if (mode == "GRU") {
      module = std::make_shared<nn::GRUImpl>(options_from<nn::GRUOptions>(cfg));
    } else {
      module = std::make_shared<nn::RNNImpl>(options_from<nn::RNNOptions>(cfg).nonlinearity(mode == "RNN_RELU" ? "relu" : "tanh"));
    }
  }
  // (output, h_n, c_n); In is a Tensor or a PackedSequence, Out likewise.
  template <typename In>
  auto run(const In& x, const Tensor& h0, const Tensor& c0) {
    using Out = std::conditional_t<std::is_same_v<In, PackedSequence>, PackedSequence, Tensor>;
    std::tuple<Out, Tensor, Tensor> r;
    if (mode == "LSTM") {
      auto& m = static_cast<nn::LSTMImpl&>(*module);
      std::optional<std::tuple<Tensor, Tensor>> hx;
      if (h0.defined()) hx = std::make_tuple(h0, c0);
      auto [out, st] = m.forward(x, hx);
      r = {out, std::get<0>(st), std::get<1>(st)};
    } else if (mode == "GRU") {
      auto [out, hn] = static_cast<nn::GRUImpl&>(*module).forward(x, h0);
      r = {out, hn, Tensor()};
    } else {
      auto [out, hn] = static_cast<nn::RNNImpl&>(*module).forward(x, h0);
      r = {out, hn, Tensor()};
    }
    return r;
  }
};

// The loss of the case, its backward, and the comparison of every gradient.
void check_loss_and_grads(const json& c, nn::Module& m, const Tensor& out, const Tensor& hn, const Tensor& cn, const Tensor& x, const Tensor& h0,
                          const Tensor& c0, double rtol, double atol) {
  EXPECT_TRUE(all_close(out, c.at("output"), rtol, atol)) << "output";
  EXPECT_TRUE(all_close(hn, c.at("h_n"), rtol, atol)) << "h_n";
  Tensor loss = add(sum(mul(out, tensor_from_json(c.at("r_out")))), sum(mul(hn, tensor_from_json(c.at("r_h")))));
  if (cn.defined()) {
    EXPECT_TRUE(all_close(cn, c.at("c_n"), rtol, atol)) << "c_n";
    loss = add(loss, sum(mul(cn, tensor_from_json(c.at("r_c")))));
  }
  loss.backward();
  const json& g = c.at("grads");
  EXPECT_TRUE(all_close(x.grad(), g.at("input"), rtol, atol)) << "grad input";
  if (h0.defined()) {
    EXPECT_TRUE(all_close(h0.grad(), g.at("h0"), rtol, atol)) << "grad h0";
  }
  if (c0.defined()) {
    EXPECT_TRUE(all_close(c0.grad(), g.at("c0"), rtol, atol)) << "grad c0";
  }
  for (const auto& item : m.named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(all_close(item.value().grad(), g.at(item.key()), rtol, atol)) << "grad " << item.key();
  }
}

void check_rnn_case(const std::string& name) {
  SCOPED_TRACE(name);
  const json& c = golden_case("rnn.json", name);
  const DType dt = dtype_of_config(c.at("config"));
  AnyRnn m(c.at("config"));
  m.module->to(dt);
  m.module->train(c.at("train").get<bool>());
  test::load_named_parameters(*m.module, c.at("params"));
  Tensor x = tensor_from_json(c.at("input"), true);
  Tensor h0 = c.contains("h0") ? tensor_from_json(c.at("h0"), true) : Tensor();
  Tensor c0 = c.contains("c0") ? tensor_from_json(c.at("c0"), true) : Tensor();
  auto [out, hn, cn] = m.run(x, h0, c0);
  EXPECT_EQ(out.dtype(), dt);
  check_loss_and_grads(c, *m.module, out, hn, cn, x, h0, c0, rtol_for(dt), atol_for(dt));
}

TEST(RNNGolden, Tanh) {
  check_rnn_case("tanh_l1_hx");
  check_rnn_case("tanh_bi_l2_nobias_nohx");
  check_rnn_case("tanh_unbatched_hx");
}
TEST(RNNGolden, ReLU) {
  check_rnn_case("relu_l2_nohx");
  check_rnn_case("relu_bi_batch_first_hx");
  check_rnn_case("relu_f64_bi_hx");
}
TEST(GRUGolden, OneAndTwoLayers) {
  check_rnn_case("gru_l1_hx");
  check_rnn_case("gru_l2_nohx");
}
TEST(GRUGolden, Bidirectional) {
  check_rnn_case("gru_bi_l3_hx");
  check_rnn_case("gru_batch_first_bi_nohx");
  check_rnn_case("gru_seq1_bi_hx");
}
TEST(GRUGolden, NoBias) { check_rnn_case("gru_nobias_l2_hx"); }
TEST(GRUGolden, Unbatched) {
  check_rnn_case("gru_unbatched_hx");
  check_rnn_case("gru_unbatched_batch_first_bi_nohx");
}
TEST(GRUGolden, Float64) { check_rnn_case("gru_f64_l2_bi_hx"); }
TEST(GRUGolden, DropoutInEvalModeIsOff) { check_rnn_case("gru_dropout_eval_l2_hx"); }
TEST(GRUGolden, Larger) { check_rnn_case("gru_larger_bi_l2_hx"); }

// ---------------------------------------------------------------- packed input through the modules

void check_packed_case(const std::string& name) {
  SCOPED_TRACE(name);
  const json& c = golden_case("rnn.json", name);
  const json& cfg = c.at("config");
  const DType dt = dtype_of_config(cfg);
  const bool batch_first = cfg.at("batch_first").get<bool>();
  AnyRnn m(cfg);
  m.module->to(dt);
  test::load_named_parameters(*m.module, c.at("params"));
  Tensor x = tensor_from_json(c.at("input"), true);
  Tensor h0 = c.contains("h0") ? tensor_from_json(c.at("h0"), true) : Tensor();
  Tensor c0 = c.contains("c0") ? tensor_from_json(c.at("c0"), true) : Tensor();
  const std::vector<int64_t> lengths = c.at("lengths").get<std::vector<int64_t>>();
  PackedSequence packed = nn::utils::rnn::pack_padded_sequence(x, tensor(lengths), batch_first, c.at("enforce_sorted").get<bool>());
  auto [res, hn, cn] = m.run(packed, h0, c0);
  EXPECT_TRUE(all_close(res.data(), c.at("out_data"), rtol_for(dt), atol_for(dt))) << "packed output data";
  EXPECT_TRUE(res.batch_sizes().is_same(packed.batch_sizes()));
  std::optional<int64_t> total;
  if (!c.at("total_length").is_null()) total = c.at("total_length").get<int64_t>();
  auto [out, out_lengths] = nn::utils::rnn::pad_packed_sequence(res, batch_first, 0.0, total);
  EXPECT_TRUE(equal(out_lengths, tensor(lengths)));
  check_loss_and_grads(c, *m.module, out, hn, cn, x, h0, c0, rtol_for(dt), atol_for(dt));
}

TEST(PackedGolden, RNN) {
  for (const char* n : {"packed_rnn_tanh_unsorted_hx", "packed_rnn_tanh_sorted_nohx", "packed_rnn_relu_unsorted_hx", "packed_rnn_relu_sorted_nohx"})
    check_packed_case(n);
}
TEST(PackedGolden, GRU) {
  for (const char* n : {"packed_gru_unsorted_hx", "packed_gru_sorted_nohx", "packed_gru_batch_first_total_length_hx", "packed_gru_f64_nobias_hx"})
    check_packed_case(n);
}
TEST(PackedGolden, LSTM) {
  for (const char* n : {"packed_lstm_unsorted_hx", "packed_lstm_sorted_nohx", "packed_lstm_batch_first_nohx", "packed_lstm_f64_l1_uni_hx"})
    check_packed_case(n);
}

// ---------------------------------------------------------------- cells

void check_cell_case(const std::string& name) {
  SCOPED_TRACE(name);
  const json& c = golden_case("rnn.json", name);
  const json& cfg = c.at("config");
  const DType dt = dtype_of_config(cfg);
  const std::string mode = cfg.at("mode").get<std::string>();
  const int64_t I = cfg.at("input_size").get<int64_t>(), H = cfg.at("hidden_size").get<int64_t>();
  const bool bias = cfg.at("bias").get<bool>();
  Tensor x = tensor_from_json(c.at("input"), true);
  Tensor h0 = c.contains("h0") ? tensor_from_json(c.at("h0"), true) : Tensor();
  std::shared_ptr<nn::Module> m;
  Tensor h;
  if (mode == "GRU") {
    auto cell = std::make_shared<nn::GRUCellImpl>(nn::GRUCellOptions(I, H).bias(bias));
    cell->to(dt);
    test::load_named_parameters(*cell, c.at("params"));
    h = cell->forward(x, h0);
    m = cell;
  } else {
    auto cell = std::make_shared<nn::RNNCellImpl>(nn::RNNCellOptions(I, H).bias(bias).nonlinearity(mode == "RNN_RELU" ? "relu" : "tanh"));
    cell->to(dt);
    test::load_named_parameters(*cell, c.at("params"));
    h = cell->forward(x, h0);
    m = cell;
  }
  const double rtol = rtol_for(dt), atol = atol_for(dt);
  EXPECT_TRUE(all_close(h, c.at("h"), rtol, atol)) << "h";
  sum(mul(h, tensor_from_json(c.at("r_h")))).backward();
  const json& g = c.at("grads");
  EXPECT_TRUE(all_close(x.grad(), g.at("input"), rtol, atol)) << "grad input";
  if (h0.defined()) {
    EXPECT_TRUE(all_close(h0.grad(), g.at("h0"), rtol, atol)) << "grad h0";
  }
  for (const auto& item : m->named_parameters()) EXPECT_TRUE(all_close(item.value().grad(), g.at(item.key()), rtol, atol)) << "grad " << item.key();
}

TEST(CellGolden, RNNCellAndGRUCell) {
  for (const char* name : {"rnncell_tanh_hx", "rnncell_relu_nohx", "rnncell_relu_nobias_unbatched_hx", "grucell_hx", "grucell_nobias_nohx",
                           "grucell_unbatched_hx", "grucell_f64_hx"})
    check_cell_case(name);
}

// ---------------------------------------------------------------- names, shapes, printing, init

void check_meta(const std::string& name, const nn::Module& m) {
  SCOPED_TRACE(name);
  const json& c = golden_case("rnn.json", name);
  EXPECT_EQ(m.state_dict().keys(), c.at("keys").get<std::vector<std::string>>());
  std::vector<Tensor> params = m.parameters();
  ASSERT_EQ(params.size(), c.at("shapes").size());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(params[i].sizes(), c.at("shapes")[i].get<Shape>()) << i;
  EXPECT_EQ(m.to_string(), c.at("repr").get<std::string>());
}

TEST(RNNMeta, NamesShapesAndPrinting) {
  check_meta("meta_rnn", *nn::RNN(10, 20));
  check_meta(
      "meta_rnn_relu_full",
      *nn::RNN(
          nn::RNNOptions(10, 20).num_layers(2).nonlinearity(RNNNonlinearity::ReLU).bias(false).batch_first(true).dropout(0.25).bidirectional(true)));
  check_meta("meta_gru", *nn::GRU(10, 20));
  check_meta("meta_gru_full", *nn::GRU(nn::GRUOptions(7, 5).num_layers(2).batch_first(true).dropout(0.1).bidirectional(true)));
  check_meta("meta_rnncell", *nn::RNNCell(3, 4));
  check_meta("meta_rnncell_relu_nobias", *nn::RNNCell(nn::RNNCellOptions(3, 4).bias(false).nonlinearity("relu")));
  check_meta("meta_grucell", *nn::GRUCell(3, 4));
  check_meta("meta_grucell_nobias", *nn::GRUCell(nn::GRUCellOptions(3, 4).bias(false)));
  nn::GRU g(nn::GRUOptions(4, 6).num_layers(2).bidirectional(true));
  EXPECT_EQ(g->flat_weights_names, g->named_parameters().keys());
  EXPECT_EQ(g->flat_weights.size(), 16u);
}

TEST(RNNInit, UniformWithinOneOverSqrtHidden) {
  manual_seed(3);
  nn::GRU g(nn::GRUOptions(30, 25).num_layers(2).bidirectional(true));
  nn::RNN r(nn::RNNOptions(30, 25).num_layers(2));
  nn::GRUCell gc(6, 25);
  nn::RNNCell rc(6, 25);
  const double bound = 1.0 / std::sqrt(25.0);
  for (nn::Module* m : std::vector<nn::Module*>{g.get(), r.get(), gc.get(), rc.get()}) {
    for (const auto& item : m->named_parameters()) {
      const Tensor& p = item.value();
      EXPECT_TRUE(p.requires_grad());
      EXPECT_LE(max(p).item<double>(), bound) << item.key();
      EXPECT_GE(min(p).item<double>(), -bound) << item.key();
      EXPECT_GT(max(p).item<double>(), 0.8 * bound) << item.key();
      EXPECT_LT(min(p).item<double>(), -0.8 * bound) << item.key();
    }
  }
}

TEST(RNNModules, DropoutOnlyBetweenLayersInTraining) {
  manual_seed(7);
  nn::GRU m(nn::GRUOptions(4, 6).num_layers(2).dropout(0.5));
  Tensor x = randn({5, 3, 4});
  m->eval();
  EXPECT_TRUE(equal(std::get<0>(m(x)), std::get<0>(m(x))));
  m->train();
  Tensor t1 = std::get<0>(m(x)), t2 = std::get<0>(m(x));
  EXPECT_FALSE(equal(t1, t2));
  // dropout = 1: layer 1 reads zeros.
  nn::RNN all(nn::RNNOptions(4, 6).num_layers(2).dropout(1.0));
  const std::vector<Tensor>& w = all->flat_weights;
  Tensor expected = std::get<0>(rnn_layer(zeros({5, 3, 6}), zeros({3, 6}), w[4], w[5], w[6], w[7]));
  EXPECT_TRUE(all_close(std::get<0>(all(x)), expected, 1e-6, 1e-7));
}

TEST(RNNModules, CloneRepointsFlatWeights) {
  // A deep copy (what DataParallel replicas are) has its own weights and computes the same thing.
  auto m = std::make_shared<nn::GRUImpl>(nn::GRUOptions(3, 5).num_layers(2).bidirectional(true));
  auto copy = nn::clone(m);
  std::vector<Tensor> copied = copy->parameters();
  ASSERT_EQ(copy->flat_weights.size(), copied.size());
  for (size_t i = 0; i < copied.size(); ++i) {
    EXPECT_TRUE(copy->flat_weights[i].is_same(copied[i])) << i;
    EXPECT_FALSE(copy->flat_weights[i].is_same(m->flat_weights[i])) << i;
  }
  Tensor x = randn({4, 2, 3});
  EXPECT_TRUE(equal(std::get<0>(m->forward(x)), std::get<0>(copy->forward(x))));
}

TEST(RNNModules, DocsExample) {
  // docs/sequence-models.md, "Recurrent layers".
  dp::nn::GRU gru(dp::nn::GRUOptions(/*input_size=*/10, /*hidden_size=*/20).num_layers(2).bidirectional(true));
  dp::Tensor x = dp::randn({5, 3, 10});
  auto [out, h_n] = gru(x);
  EXPECT_EQ(out.sizes(), Shape({5, 3, 40}));
  EXPECT_EQ(h_n.sizes(), Shape({4, 3, 20}));
  dp::nn::LSTM lstm(dp::nn::LSTMOptions(10, 20).batch_first(true));
  dp::Tensor h0 = dp::zeros({1, 3, 20}), c0 = dp::zeros({1, 3, 20});
  auto [y, state] = lstm(dp::randn({3, 5, 10}), std::make_tuple(h0, c0));
  auto [h, c] = state;
  EXPECT_EQ(y.sizes(), Shape({3, 5, 20}));
  EXPECT_EQ(c.sizes(), Shape({1, 3, 20}));
  dp::nn::RNN rnn(dp::nn::RNNOptions(10, 20).nonlinearity("relu"));
  EXPECT_GE(min(std::get<0>(rnn(x))).item<double>(), 0.0);
  dp::nn::GRUCell cell(10, 20);
  EXPECT_EQ(cell(dp::randn({3, 10})).sizes(), Shape({3, 20}));
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

std::string torch_message(const std::string& key) { return golden_case("rnn.json", "errors").at("messages").at(key).get<std::string>(); }

TEST(RNNErrors, ModulesWordThemAsPyTorch) {
  nn::GRU g(nn::GRUOptions(5, 4).num_layers(2));
  expect_error<ShapeError>([&] { g(randn({3, 2, 5}), randn({1, 2, 4})); }, torch_message("gru_hidden"));
  expect_error<ShapeError>([&] { nn::GRU(5, 4)(randn({3, 2, 5}), randn({2, 4})); }, torch_message("gru_batched_hx"));
  expect_error<ShapeError>([&] { nn::RNN(5, 4)(randn({3, 5}), randn({1, 1, 4})); }, torch_message("rnn_unbatched_hx"));
  expect_error<ShapeError>([&] { nn::GRU(5, 4)(randn({3, 2, 6})); }, torch_message("gru_input_size"));
  expect_error<ValueError>([] { nn::RNNOptions(5, 4).nonlinearity("sigmoid"); }, torch_message("nonlinearity"));
  expect_error<ShapeError>([] { nn::GRUCell(5, 4)(randn({3, 6})); }, torch_message("grucell_input_size"));
  expect_error<ShapeError>([] { nn::GRUCell(5, 4)(randn({3, 5}), randn({2, 4})); }, torch_message("grucell_batch"));
  expect_error<ShapeError>([] { nn::RNNCell(5, 4)(randn({3, 5}), randn({3, 3})); }, torch_message("rnncell_hidden_size"));
  // Packed input: the hidden state's batch is batch_sizes[0].
  PackedSequence p = nn::utils::rnn::pack_padded_sequence(zeros({3, 2, 1}), std::vector<int64_t>{3, 2});
  expect_error<ShapeError>([&] { nn::GRU(1, 4)(p, zeros({1, 3, 4})); }, torch_message("packed_hidden"));
  expect_error<ShapeError>([&] { nn::LSTM(1, 4)(p, std::make_tuple(zeros({1, 2, 4}), zeros({1, 3, 4}))); }, torch_message("packed_lstm_hidden"));
  // (Newer PyTorch wording.)
  expect_error<ShapeError>([&] { g(randn({3, 2, 5, 1})); }, "GRU: Expected input to be 2-D or 3-D but received 4-D tensor");
  expect_error<DTypeError>([&] { g(randn({3, 2, 5}, kFloat64)); }, "GRU: input must have the type torch.float32, got type torch.float64");
  expect_error<ValueError>([&] { g(randn({0, 2, 5})); }, "Expected sequence length to be larger than 0 in RNN");
  expect_error<ValueError>([] { nn::GRU(nn::GRUOptions(5, 4).dropout(-0.5)); }, "dropout should be a number in range [0, 1]");
  expect_error<ValueError>([] { nn::RNN(5, 0); }, "hidden_size must be greater than zero (RNN got 0)");
  expect_error<ShapeError>([] { nn::GRUCell(5, 4)(randn({3, 5, 1})); }, "GRUCell: Expected input to be 1-D or 2-D but received 3-D tensor");
  expect_error<ShapeError>([] { nn::RNNCell(5, 4)(randn({5}), randn({1, 4})); }, "RNNCell: Expected hx to be 1-D for unbatched 1-D input, got 2-D");
  expect_error<ShapeError>(
      [] {
        nn::GRU(5, 4)(PackedSequence(zeros({3, 2, 5}), tensor(std::vector<int64_t>{2, 1})));
      },
      "GRU: input must have 2 dimensions, got 3");
}

TEST(RNNErrors, LayerOps) {
  Tensor x = randn({3, 2, 5}), h = zeros({2, 4}), w_ih = randn({12, 5}), w_hh = randn({12, 4}), b = randn({12});
  expect_error<ShapeError>(
      [&] {
        gru_layer(x, h, randn({12, 6}), w_hh, b, b);
      },
      "gru_layer: expected w_ih of shape [12, 5] (3*hidden_size, input size)");
  expect_error<ShapeError>([&] { gru_layer(x, h, w_ih, randn({16, 4}), b, b); }, "gru_layer: expected w_hh of shape [3*H, H], got [16, 4]");
  expect_error<ShapeError>([&] { rnn_layer(x, h, randn({4, 5}), randn({4, 3}), Tensor(), Tensor()); }, "rnn_layer: expected w_hh of shape [H, H]");
  expect_error<ShapeError>([&] { gru_layer(x, zeros({3, 4}), w_ih, w_hh, b, b); }, "gru_layer: expected h0 of shape [2, 4] (batch, hidden_size)");
  expect_error<ValueError>([&] { gru_layer(x, h, w_ih, w_hh, Tensor(), b); }, "gru_layer: b_ih and b_hh must both be given");
  expect_error<DTypeError>([&] { gru_layer(x, h, w_ih.to(kFloat64), w_hh, b, b); }, "gru_layer: expected w_ih to have the input's dtype float32");
  expect_error<ShapeError>([&] { gru_cell(randn({2, 3, 5}), h, w_ih, w_hh); }, "gru_cell: expected input of shape [B, I] (2-D)");
  expect_error<ShapeError>([&] { rnn_tanh_cell(randn({2, 5}), h, w_ih, w_hh); }, "rnn_tanh_cell: expected w_hh of shape [H, H], got [12, 4]");
  // Packed layout.
  Tensor data = randn({6, 5}), bs = tensor(std::vector<int64_t>{3, 2, 1}), h3 = zeros({3, 4});
  expect_error<ShapeError>([&] { gru_layer(x, h, w_ih, w_hh, b, b, false, bs); }, "gru_layer: expected packed input data of shape [N, I] (2-D)");
  expect_error<ValueError>([&] { gru_layer(data, h3, w_ih, w_hh, b, b, false, bs.to(kFloat32)); },
                           "gru_layer: batch_sizes must be a 1-D CPU int64 tensor (PackedSequence::batch_sizes()), got");
  expect_error<ValueError>(
      [&] {
        gru_layer(data, h3, w_ih, w_hh, b, b, false, tensor(std::vector<int64_t>{2, 3, 1}));
      },
      "gru_layer: batch_sizes must not increase, got batch_sizes[0] = 2 and batch_sizes[1] = 3");
  expect_error<ValueError>(
      [&] {
        gru_layer(data, h3, w_ih, w_hh, b, b, false, tensor(std::vector<int64_t>{3, 3, 0}));
      },
      "gru_layer: batch_sizes must be positive, got batch_sizes[2] = 0");
  expect_error<ShapeError>(
      [&] {
        gru_layer(data, h3, w_ih, w_hh, b, b, false, tensor(std::vector<int64_t>{3, 2}));
      },
      "gru_layer: batch_sizes sum to 5 rows but the packed input has 6");
  expect_error<ShapeError>([&] { gru_layer(data, h, w_ih, w_hh, b, b, false, bs); },
                           "gru_layer: expected h0 of shape [3, 4] (batch_sizes[0], hidden_size), got [2, 4]");
}

// ---------------------------------------------------------------- fused ops vs composite, gradcheck

enum class Cell { Tanh, ReLU, GRU, LSTM };
const char* cell_name(Cell c) { return c == Cell::Tanh ? "tanh" : c == Cell::ReLU ? "relu" : c == Cell::GRU ? "gru" : "lstm"; }
int64_t gates(Cell c) { return c == Cell::LSTM ? 4 : c == Cell::GRU ? 3 : 1; }
void PrintTo(Cell c, std::ostream* os) { *os << cell_name(c); }  // gtest's name for a parameter

// One layer call's arguments: padded x [T, B, I], or packed x [N, I] with batch_sizes bs.
struct Args {
  Tensor x, h0, c0, w_ih, w_hh, b_ih, b_hh, bs;
  std::vector<Tensor> list() const { return {x, h0, c0, w_ih, w_hh, b_ih, b_hh}; }
};

// Batch sizes of sorted lengths.
std::vector<int64_t> batch_sizes_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> bs(static_cast<size_t>(lengths[0]), 0);
  for (int64_t l : lengths)
    for (int64_t t = 0; t < l; ++t) ++bs[t];
  return bs;
}

// Values in [-scale, scale); leaves when asked.
Args make_args(Cell cell, int64_t T, int64_t B, int64_t I, int64_t H, bool bias, DType dt, bool leaves, std::vector<int64_t> lengths = {}) {
  auto mk = [&](IntArrayRef s, double scale) {
    Tensor t = mul(sub(rand(s, dt), 0.5), 2 * scale).detach();
    return leaves ? t.requires_grad_(true) : t;
  };
  const int64_t G = gates(cell) * H;
  Args a;
  if (lengths.empty()) {
    a.x = mk({T, B, I}, 1.0);
  } else {
    std::vector<int64_t> bs = batch_sizes_of(lengths);
    int64_t N = 0;
    for (int64_t v : bs) N += v;
    a.x = mk({N, I}, 1.0);
    a.bs = tensor(bs);
    B = bs[0];
  }
  a.h0 = mk({B, H}, 0.8);
  if (cell == Cell::LSTM) a.c0 = mk({B, H}, 0.8);
  a.w_ih = mk({G, I}, 0.7);
  a.w_hh = mk({G, H}, 0.7);
  if (bias) {
    a.b_ih = mk({G}, 0.5);
    a.b_hh = mk({G}, 0.5);
  }
  return a;
}

// (output, h_n[, c_n]) of the fused op or its composite.
std::vector<Tensor> call(Cell cell, bool fused, const std::vector<Tensor>& v, bool reverse, const Tensor& bs) {
  switch (cell) {
    case Cell::LSTM: {
      auto r = (fused ? lstm_layer : lstm_layer_composite)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], reverse, bs);
      return {std::get<0>(r), std::get<1>(r), std::get<2>(r)};
    }
    case Cell::GRU: {
      auto r = (fused ? gru_layer : gru_layer_composite)(v[0], v[1], v[3], v[4], v[5], v[6], reverse, bs);
      return {std::get<0>(r), std::get<1>(r)};
    }
    case Cell::Tanh:
    case Cell::ReLU: {
      const RNNNonlinearity nl = cell == Cell::ReLU ? RNNNonlinearity::ReLU : RNNNonlinearity::Tanh;
      auto r = (fused ? rnn_layer : rnn_layer_composite)(v[0], v[1], v[3], v[4], v[5], v[6], nl, reverse, bs);
      return {std::get<0>(r), std::get<1>(r)};
    }
  }
  return {};
}

// Runs fused or composite on fresh leaves with a's values, backward of a weighted sum of the
// outputs selected by `use`; returns the outputs then the 7 gradients (undefined where none).
std::vector<Tensor> run(Cell cell, const Args& a, bool reverse, bool fused, std::vector<bool> use) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : a.list()) leaves.push_back(t.defined() ? t.detach().clone().requires_grad_(true) : Tensor());
  std::vector<Tensor> outs = call(cell, fused, leaves, reverse, a.bs);
  Tensor loss;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!use[k]) continue;
    Tensor w = cos(arange(0, outs[k].numel(), 1, TensorOptions(outs[k].dtype())).view(outs[k].sizes())).to(outs[k].device());
    Tensor term = sum(mul(outs[k], w));
    loss = loss.defined() ? add(loss, term) : term;
  }
  loss.backward();
  std::vector<Tensor> res = outs;
  for (const Tensor& t : leaves) res.push_back(t.defined() ? t.grad() : Tensor());
  return res;
}

void compare(Cell cell, const Args& a, bool reverse, std::vector<bool> use, double rtol, double atol) {
  std::vector<Tensor> f = run(cell, a, reverse, true, use), c = run(cell, a, reverse, false, use);
  ASSERT_EQ(f.size(), c.size());
  for (size_t k = 0; k < f.size(); ++k) {
    ASSERT_EQ(f[k].defined(), c[k].defined()) << "result " << k;
    if (f[k].defined()) {
      EXPECT_TRUE(all_close(f[k], c[k], rtol, atol)) << "result " << k;
    }
  }
}

Args to_f64(const Args& a) {
  auto cv = [](const Tensor& t) { return t.defined() ? t.to(kFloat64) : t; };
  return Args{cv(a.x), cv(a.h0), cv(a.c0), cv(a.w_ih), cv(a.w_hh), cv(a.b_ih), cv(a.b_hh), a.bs};
}

// float32: the fused op's largest error against float64, relative to the result's largest
// magnitude, stays within 4x the composite's (plus a floor).
void compare_f32(Cell cell, const Args& a, bool reverse) {
  std::vector<bool> all(cell == Cell::LSTM ? 3 : 2, true);
  std::vector<Tensor> ref = run(cell, to_f64(a), reverse, false, all);
  std::vector<Tensor> fused = run(cell, a, reverse, true, all), comp = run(cell, a, reverse, false, all);
  for (size_t k = 0; k < ref.size(); ++k) {
    if (!ref[k].defined()) continue;
    const double scale = std::max(1e-30, max(abs(ref[k])).item<double>());
    const double e_fused = max(abs(sub(fused[k].to(kFloat64), ref[k]))).item<double>() / scale;
    const double e_comp = max(abs(sub(comp[k].to(kFloat64), ref[k]))).item<double>() / scale;
    EXPECT_LE(e_fused, 4 * e_comp + 1e-6) << "result " << k << ": fused " << e_fused << " composite " << e_comp;
    EXPECT_LE(e_fused, 1e-4) << "result " << k;
  }
}

TEST(RNNFused, MatchesCompositePadded) {
  struct S {
    int64_t T, B, I, H;
  };
  manual_seed(13);
  for (Cell cell : {Cell::Tanh, Cell::ReLU, Cell::GRU})
    for (S s : {S{11, 7, 9, 17}, S{1, 4, 3, 16}, S{6, 1, 5, 1}})
      for (bool reverse : {false, true})
        for (bool bias : {true, false}) {
          SCOPED_TRACE(::testing::Message() << cell_name(cell) << " T" << s.T << " B" << s.B << " I" << s.I << " H" << s.H << " reverse " << reverse
                                            << " bias " << bias);
          const std::vector<bool> all(2, true);
          compare(cell, make_args(cell, s.T, s.B, s.I, s.H, bias, kFloat64, false), reverse, all, 1e-10, 1e-11);
          compare_f32(cell, make_args(cell, s.T, s.B, s.I, s.H, bias, kFloat32, false), reverse);
        }
}

TEST(RNNFused, MatchesCompositePacked) {
  manual_seed(17);
  // Packed steps shrink: rows start (reverse) and end (forward) at every step length.
  for (Cell cell : {Cell::Tanh, Cell::ReLU, Cell::GRU, Cell::LSTM})
    for (std::vector<int64_t> lengths : {std::vector<int64_t>{7, 5, 5, 2, 1}, {4, 4, 4}, {1}, {9, 1, 1}})
      for (bool reverse : {false, true})
        for (bool bias : {true, false}) {
          SCOPED_TRACE(::testing::Message() << cell_name(cell) << " lengths[0] " << lengths[0] << " B " << lengths.size() << " reverse " << reverse
                                            << " bias " << bias);
          const std::vector<bool> all(cell == Cell::LSTM ? 3 : 2, true);
          compare(cell, make_args(cell, 0, 0, 6, 13, bias, kFloat64, false, lengths), reverse, all, 1e-10, 1e-11);
          compare_f32(cell, make_args(cell, 0, 0, 6, 13, bias, kFloat32, false, lengths), reverse);
        }
}

TEST(RNNFused, PartialUseOfOutputs) {
  manual_seed(19);
  for (Cell cell : {Cell::GRU, Cell::Tanh, Cell::LSTM}) {
    const Args dense = make_args(cell, 6, 3, 4, 5, true, kFloat64, false);
    const Args packed = make_args(cell, 0, 0, 4, 5, true, kFloat64, false, {5, 3, 3, 1});
    const size_t n = cell == Cell::LSTM ? 3 : 2;
    for (size_t k = 0; k < n; ++k) {
      std::vector<bool> use(n, false);
      use[k] = true;
      for (bool reverse : {false, true}) {
        compare(cell, dense, reverse, use, 1e-10, 1e-11);
        compare(cell, packed, reverse, use, 1e-10, 1e-11);
      }
    }
  }
}

TEST(RNNFused, DegenerateSizes) {
  manual_seed(37);
  for (Cell cell : {Cell::GRU, Cell::ReLU})
    for (bool reverse : {false, true}) {
      compare(cell, make_args(cell, 4, 0, 3, 2, true, kFloat64, false), reverse, {true, true}, 1e-12, 1e-12);  // empty batch
      compare(cell, make_args(cell, 4, 2, 0, 3, true, kFloat64, false), reverse, {true, true}, 1e-10, 1e-11);  // no input features
    }
  nn::GRU m(nn::GRUOptions(3, 4).bidirectional(true).num_layers(2));
  Tensor x = randn({5, 0, 3}).set_requires_grad(true);
  auto [out, hn] = m(x);
  EXPECT_EQ(out.sizes(), Shape({5, 0, 8}));
  EXPECT_EQ(hn.sizes(), Shape({4, 0, 4}));
  sum(out).backward();
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

// Second order: gradcheck of v . d f / d inputs (create_graph, so the fused backward runs its
// differentiable form) w.r.t. the inputs.
::testing::AssertionResult check_grad_grad(const test::TensorFn& f, const std::vector<Tensor>& inputs) {
  Tensor v = rand(f(inputs).sizes(), kFloat64);
  test::TensorFn first = [f, v](const std::vector<Tensor>& xs) {
    AutoGradMode on(true);
    std::vector<Tensor> leaves;
    for (const Tensor& x : xs) leaves.push_back(x.requires_grad() ? x : x.detach().requires_grad_(true));
    std::vector<Tensor> g = autograd::grad({f(leaves)}, leaves, {v}, /*retain_graph=*/true, /*create_graph=*/true);
    std::vector<Tensor> flat;
    for (const Tensor& gi : g) flat.push_back(gi.flatten());
    return cat(flat, 0);
  };
  return gradcheck(first, inputs);
}

// The defined tensors of Args, and a function of them calling the fused op (all results in one).
std::pair<std::vector<Tensor>, test::TensorFn> layer_fn(Cell cell, const Args& a, bool reverse) {
  std::vector<int> slots;
  std::vector<Tensor> in;
  std::vector<Tensor> all = a.list();
  for (int k = 0; k < 7; ++k)
    if (all[k].defined()) {
      slots.push_back(k);
      in.push_back(all[k]);
    }
  Tensor bs = a.bs;
  test::TensorFn f = [cell, slots, reverse, bs](const std::vector<Tensor>& v) {
    std::vector<Tensor> args(7);
    for (size_t i = 0; i < slots.size(); ++i) args[slots[i]] = v[i];
    std::vector<Tensor> outs = call(cell, true, args, reverse, bs), flat;
    for (const Tensor& o : outs) flat.push_back(o.flatten());
    return cat(flat, 0);
  };
  return {in, f};
}

class LayerGradcheck : public ::testing::TestWithParam<std::tuple<Cell, bool, bool>> {};

TEST_P(LayerGradcheck, FirstAndSecondOrderPaddedAndPacked) {
  const auto [cell, reverse, bias] = GetParam();
  manual_seed(static_cast<uint64_t>(cell) * 4 + reverse * 2 + bias + 1);
  auto [inputs, f] = layer_fn(cell, make_args(cell, 3, 2, 2, 2, bias, kFloat64, true), reverse);
  EXPECT_TRUE(gradcheck(f, inputs));
  EXPECT_TRUE(check_grad_grad(f, inputs));
  auto [pin, pf] = layer_fn(cell, make_args(cell, 0, 0, 2, 2, bias, kFloat64, true, {3, 2, 1}), reverse);
  EXPECT_TRUE(gradcheck(pf, pin));
  EXPECT_TRUE(check_grad_grad(pf, pin));
}

INSTANTIATE_TEST_SUITE_P(CellReverseBias, LayerGradcheck,
                         ::testing::Combine(::testing::Values(Cell::Tanh, Cell::ReLU, Cell::GRU, Cell::LSTM), ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(cell_name(std::get<0>(info.param))) + (std::get<1>(info.param) ? "_reverse" : "_forward") +
                                  (std::get<2>(info.param) ? "_bias" : "_nobias");
                         });

TEST(RNNGradcheck, Cells) {
  manual_seed(8);
  for (Cell cell : {Cell::GRU, Cell::Tanh, Cell::ReLU}) {
    SCOPED_TRACE(cell_name(cell));
    Args a = make_args(cell, 1, 3, 2, 2, true, kFloat64, true);
    Tensor x = a.x.select(0, 0).detach().requires_grad_(true);
    auto f = [cell](const std::vector<Tensor>& v) {
      if (cell == Cell::GRU) return gru_cell(v[0], v[1], v[2], v[3], v[4], v[5]);
      if (cell == Cell::ReLU) return rnn_relu_cell(v[0], v[1], v[2], v[3], v[4], v[5]);
      return rnn_tanh_cell(v[0], v[1], v[2], v[3], v[4], v[5]);
    };
    std::vector<Tensor> inputs = {x, a.h0, a.w_ih, a.w_hh, a.b_ih, a.b_hh};
    EXPECT_TRUE(gradcheck(f, inputs));
    EXPECT_TRUE(check_grad_grad(f, inputs));
  }
}

TEST(RNNGradcheck, PackedModuleUnsortedBidirectional) {
  // Through pack_padded_sequence (unsorted), two bidirectional layers and pad_packed_sequence, with
  // h0 in the original order.
  manual_seed(5);
  nn::GRU m(nn::GRUOptions(2, 2).num_layers(2).bidirectional(true).batch_first(true));
  m->to(kFloat64);
  Tensor x = test::rand_leaf({3, 4, 2}), h0 = test::rand_leaf({4, 3, 2});
  auto f = [&](const std::vector<Tensor>& v) {
    PackedSequence p = nn::utils::rnn::pack_padded_sequence(v[0], std::vector<int64_t>{2, 4, 1}, true, false);
    auto [out, hn] = m(p, v[1]);
    Tensor padded = std::get<0>(nn::utils::rnn::pad_packed_sequence(out, true));
    return cat({padded.flatten(), hn.flatten()}, 0);
  };
  EXPECT_TRUE(gradcheck(f, {x, h0}));
}

TEST(RNNCuda, LayersAndPackedModulesMatchTheCpu) {
  // On CUDA the padded LSTM runs its own kernels and everything else the composite form; both must
  // give the CPU's fused results (outputs and every gradient).
  DP_REQUIRE_GPU();
  manual_seed(61);
  const Device gpu = Device::cuda(0);
  auto on = [](const Args& a, Device d) {
    auto mv = [d](const Tensor& t) { return t.defined() ? t.to(d) : t; };
    return Args{mv(a.x), mv(a.h0), mv(a.c0), mv(a.w_ih), mv(a.w_hh), mv(a.b_ih), mv(a.b_hh), a.bs};
  };
  for (Cell cell : {Cell::Tanh, Cell::ReLU, Cell::GRU, Cell::LSTM})
    for (bool packed : {false, true})
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(::testing::Message() << cell_name(cell) << (packed ? " packed" : " padded") << (reverse ? " reverse" : ""));
        const Args a = packed ? make_args(cell, 0, 0, 4, 6, true, kFloat64, false, {5, 3, 2}) : make_args(cell, 5, 3, 4, 6, true, kFloat64, false);
        const std::vector<bool> all(cell == Cell::LSTM ? 3 : 2, true);
        std::vector<Tensor> cpu = run(cell, a, reverse, true, all), cuda = run(cell, on(a, gpu), reverse, true, all);
        ASSERT_EQ(cpu.size(), cuda.size());
        for (size_t k = 0; k < cpu.size(); ++k) {
          ASSERT_EQ(cpu[k].defined(), cuda[k].defined()) << k;
          if (cpu[k].defined()) {
            EXPECT_EQ(cuda[k].device(), gpu) << k;
            EXPECT_TRUE(all_close(cuda[k].cpu(), cpu[k], 1e-9, 1e-10)) << "result " << k;
          }
        }
      }
  // A packed, unsorted batch through a module on the GPU.
  nn::GRU m(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
  Tensor x = randn({5, 3, 3});
  auto run_module = [&](Device d) {
    m->to(d);
    PackedSequence p = nn::utils::rnn::pack_padded_sequence(x.to(d), tensor(std::vector<int64_t>{2, 5, 3}), false, false);
    auto [out, hn] = m(p);
    return std::make_pair(std::get<0>(nn::utils::rnn::pad_packed_sequence(out)).cpu(), hn.cpu());
  };
  auto [y_cpu, h_cpu] = run_module(Device::cpu());
  auto [y_gpu, h_gpu] = run_module(gpu);
  EXPECT_TRUE(all_close(y_gpu, y_cpu, 1e-4, 1e-5));
  EXPECT_TRUE(all_close(h_gpu, h_cpu, 1e-4, 1e-5));
}

// ---------------------------------------------------------------- autograd graph

size_t graph_size(const Tensor& t) {
  std::unordered_set<const autograd::Node*> seen;
  std::vector<const autograd::Node*> stack = {t.grad_fn().get()};
  while (!stack.empty()) {
    const autograd::Node* n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n).second) continue;
    for (const autograd::Edge& e : n->next_edges()) stack.push_back(e.function.get());
  }
  return seen.size();
}

TEST(RNNFused, OneNodePerLayerAndDirection) {
  nn::GRU m(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
  auto size_for = [&](int64_t T) { return graph_size(std::get<0>(m(randn({T, 2, 3}).set_requires_grad(true)))); };
  EXPECT_EQ(size_for(2), size_for(100));
  EXPECT_EQ(std::get<0>(nn::GRU(3, 4)(randn({5, 2, 3}))).grad_fn()->name(), "GruLayerBackward0");
  EXPECT_EQ(std::get<0>(nn::RNN(3, 4)(randn({5, 2, 3}))).grad_fn()->name(), "RnnTanhLayerBackward0");
  EXPECT_EQ(std::get<0>(nn::RNN(nn::RNNOptions(3, 4).nonlinearity("relu"))(randn({5, 2, 3}))).grad_fn()->name(), "RnnReluLayerBackward0");
  EXPECT_EQ(nn::GRUCell(3, 4)(randn({2, 3})).grad_fn()->name(), "GruLayerBackward0");
  // Packed: the graph does not grow with the number of steps either.
  auto packed_size = [&](int64_t T) {
    PackedSequence p = nn::utils::rnn::pack_padded_sequence(randn({T, 3, 3}).set_requires_grad(true), std::vector<int64_t>{T, T - 1, 1});
    return graph_size(std::get<0>(m(p)).data());
  };
  EXPECT_EQ(packed_size(3), packed_size(90));
}

TEST(RNNFused, NoGradModeRecordsNothing) {
  manual_seed(23);
  Args a = make_args(Cell::GRU, 4, 2, 3, 5, true, kFloat32, true);
  Tensor with = std::get<0>(gru_layer(a.x, a.h0, a.w_ih, a.w_hh, a.b_ih, a.b_hh));
  NoGradGuard no_grad;
  Tensor without = std::get<0>(gru_layer(a.x, a.h0, a.w_ih, a.w_hh, a.b_ih, a.b_hh));
  EXPECT_EQ(without.grad_fn(), nullptr);
  EXPECT_TRUE(equal(with.detach(), without));
}

TEST(RNNFused, InPlaceChangeOfASavedWeightIsReported) {
  nn::GRU m(3, 4);
  auto [out, hn] = m(randn({5, 2, 3}));
  {
    NoGradGuard g;
    m->flat_weights[1].mul_(2.0);
  }
  EXPECT_THROW(sum(out).backward(), AutogradError);
}

}  // namespace
}  // namespace dp
