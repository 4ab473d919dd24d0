// Module traps a GPT and an RNN tagger hit: weight tying by assigning a layer's member (the registry
// follows bound members; register_parameter re-points an existing slot), and submodules held by
// std::shared_ptr / raw pointer, which a clone or a DataParallel replica can't re-point (refused by
// name instead of failing later on the wrong device).
#include <gtest/gtest.h>
#include <unistd.h>
#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/nn/serialize.h"
#include "dp/optim/optim.h"
#include "support/golden.h"
#include "support/run_command.h"
#include "support/temp_files.h"

namespace dp {
namespace {

using json = nlohmann::json;

template <typename E, typename F>
std::string expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no exception of the expected type";
  return {};
}

std::vector<std::string> keys_of(const nn::TensorDict& d) { return d.keys(); }

// A GPT's embedding and output head, tied the way nanoGPT ties them (lm_head.weight = wte.weight).
struct TiedLM : nn::Module {
  nn::Embedding wte{nullptr};
  nn::Linear proj{nullptr};
  nn::Linear lm_head{nullptr};
  explicit TiedLM(bool tie = true) {
    wte = register_module("wte", nn::Embedding(11, 4));
    proj = register_module("proj", nn::Linear(4, 4));
    lm_head = register_module("lm_head", nn::Linear(nn::LinearOptions(4, 11).bias(false)));
    if (tie) lm_head->weight = wte->weight;
  }
  Tensor forward(const Tensor& idx) { return lm_head(proj(wte(idx)).tanh()); }
};

Tensor tokens() { return tensor<int64_t>({1, 4, 7, 10, 0, 3, 3, 9, 2, 5, 6, 8}).view({3, 4}); }

TEST(WeightTying, AssigningTheMemberRegistersOneTensorUnderBothNames) {
  manual_seed(0);
  auto m = std::make_shared<TiedLM>();
  ASSERT_TRUE(m->lm_head->weight.is_same(m->wte->weight));
  // parameters(): the tied tensor once, under its first name in traversal order (PyTorch's rule).
  EXPECT_EQ(keys_of(m->named_parameters()), (std::vector<std::string>{"wte.weight", "proj.weight", "proj.bias"}));
  EXPECT_EQ(m->parameters().size(), 3u);
  EXPECT_TRUE(m->parameters()[0].is_same(m->wte->weight));
  // The submodule alone names it as its own.
  EXPECT_TRUE(m->lm_head->named_parameters()["weight"].is_same(m->wte->weight));
  // state_dict(): both keys (as PyTorch), the same values.
  const nn::TensorDict sd = m->state_dict();
  EXPECT_EQ(keys_of(sd), (std::vector<std::string>{"wte.weight", "proj.weight", "proj.bias", "lm_head.weight"}));
  EXPECT_TRUE(equal(sd["wte.weight"], sd["lm_head.weight"]));
  // The untied model has one more parameter, its stale head no longer anywhere.
  auto untied = std::make_shared<TiedLM>(false);
  EXPECT_EQ(untied->parameters().size(), 4u);
}

TEST(WeightTying, RegisterParameterRepointsAnExistingParameterAndItsMember) {
  nn::Linear lin(3, 2);
  Tensor w = randn({2, 3});
  Tensor r = lin->register_parameter("weight", w);
  EXPECT_TRUE(r.is_same(w));
  EXPECT_TRUE(lin->weight.is_same(w)) << "the bound member follows the slot";
  EXPECT_TRUE(lin->named_parameters()["weight"].is_same(w));
  EXPECT_TRUE(w.requires_grad());
  // A member-less module: the slot alone.
  nn::Module plain;
  plain.register_parameter("p", zeros({2}));
  Tensor q = ones({2});
  plain.register_parameter("p", q, /*requires_grad=*/false);
  EXPECT_TRUE(plain.named_parameters()["p"].is_same(q));
  EXPECT_FALSE(q.requires_grad());
  // Names that are buffers or submodules stay errors, as does a tensor with history.
  nn::BatchNorm1d bn(2);
  expect_error<ValueError>([&] { bn->register_parameter("running_mean", zeros({2})); }, {"'running_mean' already registered"});
  auto parent = std::make_shared<TiedLM>();
  expect_error<ValueError>([&] { parent->register_parameter("wte", zeros({2})); }, {"'wte' already registered"});
  Tensor leaf = randn({2, 3}).requires_grad_();
  expect_error<ValueError>([&] { lin->register_parameter("weight", leaf * 2); }, {"not a leaf"});
  EXPECT_TRUE(lin->weight.is_same(w)) << "a refused replacement changes nothing";
  // register_buffer on an existing buffer re-points it (and its member) too.
  Tensor mean = full({2}, 0.5);
  bn->register_buffer("running_mean", mean);
  EXPECT_TRUE(bn->running_mean.is_same(mean));
  EXPECT_TRUE(bn->named_buffers()["running_mean"].is_same(mean));
}

TEST(WeightTying, MemberAssignmentsAreFollowedEverywhere) {
  nn::Linear lin(3, 2);
  // An undefined tensor: the parameter becomes absent, as PyTorch's `lin.bias = None`.
  lin->bias = Tensor();
  EXPECT_EQ(keys_of(lin->named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(keys_of(lin->state_dict()), (std::vector<std::string>{"weight"}));
  // A fresh tensor: taken as it is (its requires_grad flag included).
  Tensor w = full({2, 3}, 0.25);
  lin->weight = w;
  EXPECT_TRUE(lin->parameters()[0].is_same(w));
  EXPECT_FALSE(lin->parameters()[0].requires_grad());
  // to() converts the registered tensor in place, so the member (the same tensor) follows.
  lin->to(kFloat64);
  EXPECT_EQ(w.dtype(), kFloat64);
  EXPECT_TRUE(lin->weight.is_same(w));
  // A tensor with autograd history can't be a parameter: the next query says so.
  Tensor leaf = randn({2, 3}, TensorOptions().dtype(kFloat64)).requires_grad_();
  lin->weight = leaf * 2;
  expect_error<ValueError>([&] { lin->parameters(); }, {"Linear", "parameter 'weight'", "not a leaf", "detach()"});
  lin->weight = leaf;
  EXPECT_TRUE(lin->parameters()[0].is_same(leaf));
}

TEST(WeightTying, TiedGradientsAccumulateIntoOneTensorAndOptimizersSeeIt) {
  manual_seed(1);
  auto tied = std::make_shared<TiedLM>();
  // The same computation untied: gradient of the tied weight = sum of the two uses' gradients.
  auto untied = std::make_shared<TiedLM>(false);
  untied->load_state_dict(tied->state_dict());
  Tensor x = tokens();
  tied->forward(x).pow(2).mean().backward();
  untied->forward(x).pow(2).mean().backward();
  Tensor expect = untied->wte->weight.grad() + untied->lm_head->weight.grad();
  EXPECT_TRUE(allclose(tied->wte->weight.grad(), expect, 1e-5, 1e-7));
  EXPECT_TRUE(tied->lm_head->weight.grad().is_same(tied->wte->weight.grad()));

  optim::SGD sgd(tied->parameters(), optim::SGDOptions(0.1));
  optim::AdamW adamw(tied->parameters(), optim::AdamWOptions(0.1));
  for (optim::Optimizer* opt : std::vector<optim::Optimizer*>{&sgd, &adamw}) {
    size_t n = 0;
    for (const auto& g : opt->param_groups()) n += g.params().size();
    EXPECT_EQ(n, 3u);
  }
  const Tensor before = tied->wte->weight.detach().clone();
  sgd.step();
  EXPECT_TRUE(allclose(tied->wte->weight, before - expect * 0.1, 1e-5, 1e-6)) << "one update, with the summed gradient";
  EXPECT_TRUE(tied->lm_head->weight.is_same(tied->wte->weight));
}

TEST(WeightTying, ClonesKeepTheTie) {
  auto m = std::make_shared<TiedLM>();
  auto c = nn::clone(m);
  EXPECT_TRUE(c->lm_head->weight.is_same(c->wte->weight));
  EXPECT_FALSE(c->wte->weight.is_same(m->wte->weight));
  EXPECT_EQ(c->parameters().size(), 3u);
  EXPECT_TRUE(c->lm_head->named_parameters()["weight"].is_same(c->wte->weight));
  // A tie made after construction, then cloned.
  auto late = std::make_shared<TiedLM>(false);
  late->lm_head->weight = late->wte->weight;
  auto lc = nn::clone(late);
  EXPECT_TRUE(lc->lm_head->weight.is_same(lc->wte->weight));
  EXPECT_EQ(lc->parameters().size(), 3u);
}

TEST(WeightTying, SaveAndLoadRoundTripKeepsTheTie) {
  test::TempDir dir;
  manual_seed(2);
  auto m = std::make_shared<TiedLM>();
  const std::string path = dir.file("tied.safetensors");
  dp::save(m, path);
  const nn::TensorDict file = dp::load(path);
  EXPECT_EQ(keys_of(file).size(), 4u);
  EXPECT_TRUE(equal(file["wte.weight"], file["lm_head.weight"]));

  manual_seed(3);
  auto fresh = std::make_shared<TiedLM>();
  dp::load(fresh, path);
  EXPECT_TRUE(fresh->lm_head->weight.is_same(fresh->wte->weight));
  EXPECT_TRUE(equal(fresh->wte->weight, m->wte->weight));
  EXPECT_TRUE(allclose(fresh->forward(tokens()), m->forward(tokens())));
}

// PyTorch reads the file into the same tied model (tests/golden/check_tied_checkpoint.py loads it
// strictly, checks the tie survived and prints the logits for our tokens).
TEST(WeightTying, PyTorchLoadsTheTiedCheckpoint) {
  const char* python = "/usr/bin/python3";
  if (::access(python, X_OK) != 0) GTEST_SKIP() << python << " not found: cannot check our file with PyTorch";
  test::TempDir dir;
  manual_seed(4);
  auto m = std::make_shared<TiedLM>();
  const std::string path = dir.file("tied.safetensors");
  dp::save(m, path);
  const std::string script = std::string(DP_GOLDEN_DIR) + "/check_tied_checkpoint.py";
  auto [rc, out] = test::run_command(std::string(python) + " '" + script + "' '" + path + "'");
  if (rc != 0 && out.find("No module named 'torch'") != std::string::npos) GTEST_SKIP() << "PyTorch is not importable: " << out;
  ASSERT_EQ(rc, 0) << out;
  const json result = json::parse(out.substr(out.rfind('\n', out.size() - 2) + 1));
  EXPECT_TRUE(result.at("tied").get<bool>()) << out;
  EXPECT_TRUE(test::all_close(m->forward(tokens()).detach(), result.at("output"), 1e-5, 1e-6)) << out;
}

TEST(WeightTying, ACheckpointWithDifferentValuesForTiedKeysIsRefused) {
  auto m = std::make_shared<TiedLM>();
  const Tensor before = m->wte->weight.detach().clone();
  nn::TensorDict state;  // a copy: state_dict() aliases the live tensors
  for (const auto& item : m->state_dict()) state.insert(item.key(), item.value().clone());
  nn::TensorDict differing;
  for (const auto& item : state) differing.insert(item.key(), item.key() == "lm_head.weight" ? item.value() + 1.0 : item.value().clone());
  expect_error<ValueError>([&] { m->load_state_dict(differing); }, {"tied parameters wte.weight and lm_head.weight", "different values", "untie"});
  EXPECT_TRUE(equal(m->wte->weight, before)) << "a refused load changes nothing";
  // Equal values load; and a checkpoint with one of the two keys loads non-strictly.
  nn::TensorDict equal_values;
  for (const auto& item : state) equal_values.insert(item.key(), item.value() * 2.0);
  m->load_state_dict(equal_values);
  EXPECT_TRUE(equal(m->wte->weight, before * 2.0));
  nn::TensorDict one;
  for (const auto& item : state)
    if (item.key() != "lm_head.weight") one.insert(item.key(), item.value());
  nn::LoadResult r = m->load_state_dict(one, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"lm_head.weight"});
  EXPECT_TRUE(equal(m->lm_head->weight, before));
}

TEST(WeightTying, ConcurrentQueriesAfterAnAssignmentAgree) {
  auto m = std::make_shared<TiedLM>(false);
  m->lm_head->weight = m->wte->weight;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (m->parameters().size() == 3 && m->state_dict().size() == 4) ++ok;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 800);
}

// ------------------------------------------------------------------ children held by pointer

struct Block : nn::Module {
  nn::Linear fc{nullptr};
  Block() { fc = register_module("fc", nn::Linear(3, 3)); }
  Tensor forward(const Tensor& x) { return fc(x).relu(); }
};

// The trap: a registered child also kept as std::shared_ptr (or a raw pointer).
struct SharedPtrChild : nn::Module {
  std::shared_ptr<Block> block;
  SharedPtrChild() { block = register_module("block", std::make_shared<Block>()); }
  Tensor forward(const Tensor& x) { return block->forward(x); }
};
struct RawPtrChild : nn::Module {
  int64_t scale = 2;
  Block* block = nullptr;
  RawPtrChild() { block = register_module("block", std::make_shared<Block>()).get(); }
  Tensor forward(const Tensor& x) { return block->forward(x) * static_cast<double>(scale); }
};
// One level down: the encoder holds its sibling's child.
struct Encoder : nn::Module {
  std::shared_ptr<nn::LinearImpl> shared_out;
  nn::Linear fc{nullptr};
  Encoder() { fc = register_module("fc", nn::Linear(3, 3)); }
};
struct Nested : nn::Module {
  nn::ModuleHolder<Encoder> encoder{nullptr};
  nn::Linear out{nullptr};
  Nested() {
    encoder = register_module("encoder", nn::ModuleHolder<Encoder>());
    out = register_module("out", nn::Linear(3, 3));
    encoder->shared_out = out.ptr();
  }
};

// Correct ways to hold children: none is refused.
struct Correct : nn::Module {
  nn::ModuleHolder<Block> block{nullptr};
  nn::Linear fc{nullptr};
  nn::Sequential seq{nullptr};
  nn::ModuleList list{nullptr};
  nn::ModuleDict dict{nullptr};
  std::vector<nn::Linear> heads;
  std::shared_ptr<nn::LinearImpl> frozen;  // a module outside the tree: shared, as Python's shallow copy
  Tensor w;
  std::string label = "correct";
  Correct(std::shared_ptr<nn::LinearImpl> external) : frozen(std::move(external)) {
    block = register_module("block", nn::ModuleHolder<Block>());
    fc = register_module("fc", nn::Linear(3, 3));
    seq = register_module("seq", nn::Sequential(nn::Linear(3, 3), nn::ReLU()));
    list = register_module("list", nn::ModuleList());
    list->push_back(nn::Linear(3, 3));
    dict = register_module("dict", nn::ModuleDict());
    dict->insert("head", nn::Linear(3, 2));
    for (int i = 0; i < 2; ++i) heads.push_back(register_module("head" + std::to_string(i), nn::Linear(3, 1)));
    w = register_parameter("w", randn({3}));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = seq(block(fc(x))) + list->ptr<nn::LinearImpl>(0)->forward(x) * w;
    return dict->at<nn::LinearImpl>("head")->forward(h) + heads[1](h) + frozen->forward(h).sum(-1, true);
  }
};

TEST(ChildrenByPointer, ASharedPtrOrRawPointerMemberIsRefusedByName) {
  auto m = std::make_shared<SharedPtrChild>();
  expect_error<ValueError>([&] { nn::clone(m); }, {"cannot copy SharedPtrChild", "the copy of the module itself (a SharedPtrChild)",
                                                   "submodule 'block' (a Block)", "std::shared_ptr<Block>", "dp::nn::ModuleHolder<Block>"});
  auto raw = std::make_shared<RawPtrChild>();
  expect_error<ValueError>([&] { nn::clone(raw); }, {"submodule 'block' (a Block)", "raw pointer", "byte offset"});
  auto nested = std::make_shared<Nested>();
  expect_error<ValueError>([&] { nn::clone(nested); }, {"the copy of 'encoder' (a Encoder)", "submodule 'out' (a Linear)", "ModuleHolder<Linear>"});
}

TEST(ChildrenByPointer, CorrectlyHeldChildrenAreCloned) {
  manual_seed(5);
  auto external = nn::Linear(3, 1).ptr();
  auto m = std::make_shared<Correct>(external);
  auto c = nn::clone(m);
  EXPECT_NE(c->block.get(), m->block.get());
  EXPECT_NE(c->heads[1].get(), m->heads[1].get());
  EXPECT_TRUE(c->heads[1]->weight.is_same(c->named_parameters()["head1.weight"]));
  EXPECT_EQ(c->frozen.get(), external.get()) << "a module outside the tree stays shared";
  Tensor x = randn({4, 3});
  EXPECT_TRUE(allclose(c->forward(x), m->forward(x)));
  // The library's own models too.
  EXPECT_NO_THROW(nn::clone(std::make_shared<TiedLM>()));
  nn::Sequential seq(nn::Linear(2, 2), nn::Tanh(), nn::Linear(2, 1));
  EXPECT_NO_THROW(nn::clone(seq.ptr()));
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2));
  EXPECT_NO_THROW(nn::clone(lstm.ptr()));
}

}  // namespace
}  // namespace dp
