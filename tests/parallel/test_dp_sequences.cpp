// DataParallel and DistributedDataParallel with the models of sequence work: tied weights (a GPT's
// embedding and head) give one-device gradients on 2 CPU devices and 2 DDP ranks; submodules held
// by pointer are refused by name; a per-token loss (ignore_index over padded sequences) returned by
// a plain lambda is exact whatever the replicas' numbers of real tokens; per-argument scatter and
// gather dims (time-major input, lengths as a tensor or a std::vector<int64_t>, h0) give
// one-device outputs and gradients on 2 and 3 devices; per-replica padding is a named gather error.
#include <gtest/gtest.h>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include "distributed/ddp_test_support.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/dp.h"
#include "dp/nn/functional.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"
#include "support/devices.h"

namespace dp::parallel {
namespace {

using dp::test::cpu_devices;

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

class DPSequences : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

// ------------------------------------------------------------------------------- tied weights

struct TiedLM : nn::Module {
  nn::Embedding wte{nullptr};
  nn::Linear proj{nullptr};
  nn::Linear lm_head{nullptr};
  TiedLM() {
    wte = register_module("wte", nn::Embedding(13, 6));
    proj = register_module("proj", nn::Linear(6, 6));
    lm_head = register_module("lm_head", nn::Linear(nn::LinearOptions(6, 13).bias(false)));
    lm_head->weight = wte->weight;  // nanoGPT's tie
  }
  Tensor forward(const Tensor& idx) { return lm_head(proj(wte(idx)).tanh()); }
};

std::shared_ptr<TiedLM> tied_model(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<TiedLM>();
  m->remember_type<TiedLM>();
  return m;
}

Tensor token_batch(int64_t rows, int64_t steps, uint64_t seed) {
  Generator gen(seed);
  return randint(0, 13, {rows, steps}, TensorOptions().dtype(kInt64), &gen);
}

// Gradients of the reference: one device, the whole batch.
std::vector<Tensor> reference_grads(const Tensor& idx, const Tensor& target) {
  auto ref = tied_model(7);
  cross_entropy(ref->forward(idx).flatten(0, 1), target.flatten()).backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : ref->parameters()) grads.push_back(p.grad());
  return grads;
}

TEST_F(DPSequences, TiedWeightsGiveOneDeviceGradientsOnTwoCpuDevices) {
  const Tensor idx = token_batch(6, 5, 1), target = token_batch(6, 5, 2);
  const std::vector<Tensor> expect = reference_grads(idx, target);
  auto model = tied_model(7);
  model->to(Device::cpu(0));
  nn::DataParallel<TiedLM> net(model, cpu_devices(2));
  for (int step = 0; step < 2; ++step) {  // the second step runs on the kept replicas
    model->zero_grad();
    Tensor out = net(idx);
    cross_entropy(out.flatten(0, 1), target.flatten().to(out.device())).backward();
    const auto params = model->parameters();
    ASSERT_EQ(params.size(), expect.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(allclose(params[i].grad().cpu(), expect[i], 1e-5, 1e-6)) << "step " << step << " parameter " << i;
  }
  EXPECT_EQ(net->replica_builds(), 2);
  // Every replica keeps the tie: one tensor for both names.
  for (const auto& r : replicate(model, cpu_devices(2))) {
    EXPECT_TRUE(r->lm_head->weight.is_same(r->wte->weight));
    EXPECT_EQ(r->parameters().size(), 3u);
  }
}

TEST_F(DPSequences, TyingAfterTheReplicasWereBuiltRebuildsThem) {
  manual_seed(3);
  auto model = std::make_shared<TiedLM>();
  model->lm_head->weight = Tensor(randn({13, 6}).requires_grad_());  // untied first
  model->to(Device::cpu(0));
  nn::DataParallel<TiedLM> net(model, cpu_devices(2));
  const Tensor idx = token_batch(4, 3, 5);
  net(idx);
  EXPECT_EQ(model->parameters().size(), 4u);
  model->lm_head->weight = model->wte->weight;  // now tied: the structure changed
  Tensor out = net(idx);
  EXPECT_EQ(net->replica_builds(), 4);
  out.sum().backward();
  EXPECT_TRUE(model->lm_head->weight.grad().defined());
  EXPECT_TRUE(model->lm_head->weight.grad().is_same(model->wte->weight.grad()));
}

TEST_F(DPSequences, TiedWeightsGiveOneDeviceGradientsUnderDDP) {
  const Tensor idx = token_batch(6, 5, 3), target = token_batch(6, 5, 4);
  const std::vector<Tensor> expect = reference_grads(idx, target);
  std::vector<std::shared_ptr<TiedLM>> models{tied_model(7), tied_model(99)};  // DDP copies rank 0's
  distributed::test::run_ranks(2, [&](const distributed::ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<TiedLM> ddp(models[r], group);
    EXPECT_EQ(ddp->parameters().size(), 3u);
    Tensor x = idx.narrow(0, 3 * r, 3), t = target.narrow(0, 3 * r, 3);
    Tensor out = ddp(x);
    cross_entropy(out.flatten(0, 1), t.flatten()).backward();
    EXPECT_TRUE(models[r]->lm_head->weight.is_same(models[r]->wte->weight));
    const auto params = ddp->parameters();
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(allclose(params[i].grad(), expect[i], 1e-5, 1e-6)) << "rank " << r << " parameter " << i;
  });
}

// ------------------------------------------------------------------ children held by pointer

struct Block : nn::Module {
  nn::Linear fc{nullptr};
  Block() { fc = register_module("fc", nn::Linear(3, 3)); }
  Tensor forward(const Tensor& x) { return fc(x).relu(); }
};
struct SharedPtrChild : nn::Module {
  std::shared_ptr<Block> block;
  SharedPtrChild() { block = register_module("block", std::make_shared<Block>()); }
  Tensor forward(const Tensor& x) { return block->forward(x); }
};
// The pointers live in a vector's heap buffer, out of the copy check's sight.
struct VectorOfSharedPtrs : nn::Module {
  std::vector<std::shared_ptr<Block>> blocks;
  VectorOfSharedPtrs() {
    for (int i = 0; i < 2; ++i) blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<Block>()));
  }
  Tensor forward(const Tensor& x) { return blocks[1]->forward(blocks[0]->forward(x)); }
};

TEST_F(DPSequences, ASharedPtrChildWorksOnOneDeviceAndIsRefusedByNameOnTwo) {
  auto model = std::make_shared<SharedPtrChild>();
  const Tensor x = randn({4, 3});
  nn::DataParallel<SharedPtrChild> one(model, cpu_devices(1));  // the module itself is called
  EXPECT_EQ(one(x).sizes(), Shape({4, 3}));
  nn::DataParallel<SharedPtrChild> two(model, cpu_devices(2));
  expect_error<ValueError>([&] { two(x); }, {"DataParallel replica", "submodule 'block' (a Block)", "std::shared_ptr<Block>", "ModuleHolder<Block>"});
}

TEST_F(DPSequences, AContainerOfSharedPtrsFailsWithAHintAtTheDeviceError) {
  auto model = std::make_shared<VectorOfSharedPtrs>();
  model->to(Device::cpu(0));
  nn::DataParallel<VectorOfSharedPtrs> net(model, cpu_devices(2));
  expect_error<DeviceError>([&] { net(randn({4, 3})); }, {"in replica 1 on device cpu:1", "it met a tensor on cpu:0", "ModuleHolder<...>"});
}

// ------------------------------------------------------------------ per-token losses

namespace F = nn::functional;
constexpr int64_t kPad = -100;

// A tagger: one tag per token ([B, T] tokens -> [B, T, 5] logits).
struct Tagger : nn::Module {
  nn::Embedding emb{nullptr};
  nn::Linear out{nullptr};
  Tagger() {
    emb = register_module("emb", nn::Embedding(20, 8));
    out = register_module("out", nn::Linear(8, 5));
  }
  Tensor forward(const Tensor& tokens) { return out(emb(tokens).tanh()); }
};

std::shared_ptr<Tagger> tagger(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<Tagger>();
  m->remember_type<Tagger>();
  return m;
}

// Six padded sequences whose real lengths make the replicas' token counts very uneven
// (2 devices: 21 and 4 tokens; 3 devices: 14, 8 and 3).
std::pair<Tensor, Tensor> tagged_batch() {
  const std::vector<int64_t> lengths{7, 7, 7, 1, 1, 2};
  Generator gen(11);
  Tensor tokens = randint(1, 20, {6, 7}, TensorOptions().dtype(kInt64), &gen);
  Tensor tags = randint(0, 5, {6, 7}, TensorOptions().dtype(kInt64), &gen);
  Tensor pos = arange(7, kInt64).view({1, 7});
  Tensor valid = pos.lt(tensor<int64_t>(lengths).view({6, 1}));
  return {where(valid, tokens, zeros_like(tokens)), where(valid, tags, full_like(tags, kPad))};
}

// One device: the loss of the whole batch and the parameters' gradients.
std::pair<Tensor, std::vector<Tensor>> one_device(const std::function<Tensor(const Tensor&, const Tensor&)>& criterion) {
  auto [tokens, tags] = tagged_batch();
  auto ref = tagger(21);
  Tensor loss = criterion(ref->forward(tokens), tags);
  loss.backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : ref->parameters()) grads.push_back(p.grad());
  return {loss.detach(), grads};
}

void expect_same_as_one_device(const std::function<Tensor(const Tensor&, const Tensor&)>& criterion, int devices) {
  SCOPED_TRACE(std::to_string(devices) + " devices");
  auto [expect_loss, expect_grads] = one_device(criterion);
  auto [tokens, tags] = tagged_batch();
  auto model = tagger(21);
  model->to(Device::cpu(0));
  nn::DataParallel<Tagger> net(model, cpu_devices(devices));
  Tensor loss = net->forward_loss(criterion, tags, tokens);
  EXPECT_TRUE(allclose(loss.cpu(), expect_loss, 1e-5, 1e-6)) << loss.item<double>() << " vs " << expect_loss.item<double>();
  loss.backward();
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(allclose(params[i].grad().cpu(), expect_grads[i], 1e-5, 1e-6)) << "parameter " << i;
}

Tensor token_cross_entropy(const Tensor& out, const Tensor& tags) {
  return F::cross_entropy(out.flatten(0, 1), tags.flatten(), F::CrossEntropyFuncOptions().ignore_index(kPad));
}

TEST_F(DPSequences, APerTokenLossFromALambdaIsExactWithUnevenTokenCounts) {
  for (int devices : {2, 3}) expect_same_as_one_device(token_cross_entropy, devices);
  // Weighted, with label smoothing, through the module called in the lambda, and nll_loss.
  const Tensor w = tensor<float>({1.0f, 2.0f, 0.5f, 1.5f, 3.0f});
  auto weighted = [w](const Tensor& out, const Tensor& tags) {
    nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().weight(w.to(out.device())).ignore_index(kPad).label_smoothing(0.1));
    return ce(out.flatten(0, 1), tags.flatten());
  };
  expect_same_as_one_device(weighted, 3);
  auto nll = [w](const Tensor& out, const Tensor& tags) {
    return nll_loss(log_softmax(out, -1).flatten(0, 1), tags.flatten(), w.to(out.device()), kPad);
  };
  expect_same_as_one_device(nll, 2);
  // An element-wise mean (mse over the padded logits): counted by elements.
  auto mse = [](const Tensor& out, const Tensor& tags) { return mse_loss(out.sum(-1), tags.to(out.dtype())); };
  expect_same_as_one_device(mse, 3);
}

TEST_F(DPSequences, AnyOtherTensorIsAMeanOverTheTargetsElements) {
  // Not one of the library's means (scaled), so the documented fallback applies: each replica's
  // value weighted by its target's element count (here equal: 3 rows of 7), not by real tokens.
  auto scaled = [](const Tensor& out, const Tensor& tags) { return token_cross_entropy(out, tags) * 2.0; };
  auto [tokens, tags] = tagged_batch();
  auto model = tagger(21);
  Tensor full_out = model->forward(tokens).detach();
  const Tensor part0 = scaled(full_out.narrow(0, 0, 3), tags.narrow(0, 0, 3));
  const Tensor part1 = scaled(full_out.narrow(0, 3, 3), tags.narrow(0, 3, 3));
  const Tensor fallback = (part0 * 21.0 + part1 * 21.0) / 42.0;
  model->to(Device::cpu(0));
  nn::DataParallel<Tagger> net(model, cpu_devices(2));
  Tensor loss = net->forward_loss(scaled, tags, tokens);
  EXPECT_TRUE(allclose(loss.cpu(), fallback, 1e-5, 1e-6));
  // ...which is not the per-token loss: the uneven counts matter.
  EXPECT_FALSE(allclose(loss.cpu(), scaled(full_out, tags), 1e-3, 1e-4));
}

TEST_F(DPSequences, MeanLossRecorderRecordsTheLibrarysMeans) {
  auto [tokens, tags] = tagged_batch();
  Tensor logits = randn({42, 5});
  const Tensor plain = cross_entropy(logits, tags.flatten(), {}, kPad);
  MeanLossRecorder outer;
  Tensor a;
  {
    MeanLossRecorder inner;
    a = cross_entropy(logits, tags.flatten(), {}, kPad);
    const MeanLossRecorder::Entry* e = inner.find(a);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->count.item<double>(), 25.0);  // the real tokens
    EXPECT_TRUE(allclose(e->sum, cross_entropy(logits, tags.flatten(), {}, kPad, Reduction::Sum)));
    EXPECT_EQ(outer.find(a), nullptr) << "the innermost recorder records";
    EXPECT_EQ(inner.find(a + 0.0), nullptr) << "an equal tensor is not the recorded one";
  }
  EXPECT_TRUE(allclose(a, plain, 1e-6, 1e-7)) << "the recorded mean is the mean";
  Tensor b = mse_loss(logits, zeros_like(logits));
  ASSERT_NE(outer.find(b), nullptr);
  EXPECT_EQ(outer.find(b)->count.item<double>(), 210.0);
  EXPECT_EQ(outer.find(mse_loss(logits, zeros_like(logits), Reduction::Sum)), nullptr) << "sums are not recorded";
}

TEST_F(DPSequences, APerTokenLossIsExactUnderDDPWithUnevenTokenCounts) {
  auto [expect_loss, expect_grads] = one_device(token_cross_entropy);
  auto [tokens, tags] = tagged_batch();
  std::vector<std::shared_ptr<Tagger>> models{tagger(21), tagger(5)};
  distributed::test::run_ranks(2, [&](const distributed::ProcessGroupPtr& group, int r) {
    nn::DistributedDataParallel<Tagger> ddp(models[r], group);
    Tensor loss = ddp->forward_loss(token_cross_entropy, tags.narrow(0, 3 * r, 3), tokens.narrow(0, 3 * r, 3));
    EXPECT_TRUE(allclose(loss, expect_loss, 1e-5, 1e-6)) << "rank " << r;
    loss.backward();
    const auto params = ddp->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(allclose(params[i].grad(), expect_grads[i], 1e-5, 1e-6)) << "rank " << r << " parameter " << i;
  });
}

// ------------------------------------------------------------------ per-argument dims

// A time-major masked recurrent layer written with plain ops: x [T, B, I], lengths [B], h0 [1, B, H]
// -> (out [T, B, H], zero past each sequence's length; h_n [1, B, H], each sequence's last state).
struct MaskedRnn : nn::Module {
  nn::Linear in{nullptr}, rec{nullptr};
  MaskedRnn() {
    in = register_module("in", nn::Linear(3, 5));
    rec = register_module("rec", nn::Linear(nn::LinearOptions(5, 5).bias(false)));
  }
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& lengths, const Tensor& h0) {
    Tensor h = h0.select(0, 0);
    const Tensor len = lengths.to(x.device());
    std::vector<Tensor> outs;
    for (int64_t t = 0; t < x.size(0); ++t) {
      Tensor next = (in(x.select(0, t)) + rec(h)).tanh();
      Tensor live = len.gt(t).to(x.dtype()).unsqueeze(1);
      h = next * live + h * (1.0 - live);
      outs.push_back(next * live);
    }
    return {stack(outs, 0), h.unsqueeze(0)};
  }
  // The lengths as a host vector (as a Python list would be).
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const std::vector<int64_t>& lengths, const Tensor& h0) {
    return forward(x, tensor<int64_t>(lengths), h0);
  }
};

std::shared_ptr<MaskedRnn> masked_rnn() {
  manual_seed(31);
  auto m = std::make_shared<MaskedRnn>();
  m->remember_type<MaskedRnn>();
  return m;
}

struct RnnBatch {
  Tensor x, h0;
  std::vector<int64_t> lengths{6, 2, 5, 1, 3, 6, 4};
  RnnBatch() {
    Generator gen(41);
    x = randn({6, 7, 3}, TensorOptions(), &gen).requires_grad_();
    h0 = randn({1, 7, 5}, TensorOptions(), &gen).requires_grad_();
  }
};

// A loss that weighs every output differently, so a misplaced row can't cancel out.
Tensor rnn_loss(const Tensor& out, const Tensor& h_n) {
  Tensor w = arange(out.numel(), kFloat32).view(out.sizes()).to(out.device()).mul(0.01).sin();
  return (out * w).sum() + h_n.pow(2).sum();
}

TEST_F(DPSequences, PerArgumentDimsGiveOneDeviceOutputsAndGradients) {
  RnnBatch b;
  const Tensor lengths = tensor<int64_t>(b.lengths);
  auto ref = masked_rnn();
  auto [out_ref, h_ref] = ref->forward(b.x, lengths, b.h0);
  rnn_loss(out_ref, h_ref).backward();
  const Tensor gx = b.x.grad().clone(), gh = b.h0.grad().clone();
  std::vector<Tensor> gp;
  for (const Tensor& p : ref->parameters()) gp.push_back(p.grad());

  for (int devices : {2, 3}) {
    for (bool as_vector : {false, true}) {
      SCOPED_TRACE(std::to_string(devices) + " devices, lengths as " + (as_vector ? "std::vector" : "a tensor"));
      b.x.set_grad(Tensor());
      b.h0.set_grad(Tensor());
      auto model = masked_rnn();
      model->to(Device::cpu(0));
      nn::DataParallel<MaskedRnn> net(model, DataParallelOptions(cpu_devices(devices)).in_dims({1, 0, 1}).out_dims({1, 1}));
      auto [out, h_n] = as_vector ? net(b.x, b.lengths, b.h0) : net(b.x, lengths, b.h0);
      EXPECT_EQ(out.sizes(), Shape({6, 7, 5}));
      EXPECT_EQ(h_n.sizes(), Shape({1, 7, 5}));
      EXPECT_TRUE(allclose(out.cpu(), out_ref, 1e-5, 1e-6));
      EXPECT_TRUE(allclose(h_n.cpu(), h_ref, 1e-5, 1e-6));
      rnn_loss(out, h_n).backward();
      EXPECT_TRUE(allclose(b.x.grad(), gx, 1e-5, 1e-6));
      EXPECT_TRUE(allclose(b.h0.grad(), gh, 1e-5, 1e-6));
      const auto params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(allclose(params[i].grad().cpu(), gp[i], 1e-5, 1e-6)) << "parameter " << i;
    }
  }
}

TEST_F(DPSequences, TargetDimSplitsATimeMajorTargetForForwardLoss) {
  RnnBatch b;
  Generator gen(43);
  Tensor tags = randint(0, 5, {6, 7}, TensorOptions().dtype(kInt64), &gen);
  tags = where(arange(6, kInt64).view({6, 1}).lt(tensor<int64_t>(b.lengths).view({1, 7})), tags, full_like(tags, kPad));
  auto criterion = [](const std::tuple<Tensor, Tensor>& out, const Tensor& t) {
    return F::cross_entropy(std::get<0>(out).flatten(0, 1), t.flatten(), F::CrossEntropyFuncOptions().ignore_index(kPad));
  };
  auto ref = masked_rnn();
  Tensor expect = criterion(ref->forward(b.x, b.lengths, b.h0), tags);
  expect.backward();
  auto model = masked_rnn();
  model->to(Device::cpu(0));
  nn::DataParallel<MaskedRnn> net(model, DataParallelOptions(cpu_devices(3)).in_dims({1, 0, 1}).target_dim(1));
  Tensor loss = net->forward_loss(criterion, tags, b.x, b.lengths, b.h0);
  EXPECT_TRUE(allclose(loss.cpu(), expect.detach(), 1e-5, 1e-6));
  loss.backward();
  const auto params = model->parameters(), ref_params = ref->parameters();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(allclose(params[i].grad().cpu(), ref_params[i].grad(), 1e-5, 1e-6)) << "parameter " << i;
}

TEST_F(DPSequences, VectorsOfValuesAreCopiedByDefaultAndSplitWithAnInDim) {
  SplitOptions two;
  two.devices = cpu_devices(2);
  const std::vector<int64_t> lengths{5, 4, 3, 2, 1};
  const Tensor x = randn({5, 2});
  // PyTorch's rule for a Python list: every replica gets all of it.
  auto copied = scatter_args(std::make_tuple(x, lengths), two);
  ASSERT_EQ(copied.size(), 2u);
  EXPECT_EQ(std::get<1>(copied[1]), lengths);
  // With per-argument dims: split with the batch, also inside containers of the argument.
  two.arg_dims = {0, 0};
  auto split = scatter_args(std::make_tuple(x, lengths), two);
  EXPECT_EQ(std::get<1>(split[0]), (std::vector<int64_t>{5, 4, 3}));
  EXPECT_EQ(std::get<1>(split[1]), (std::vector<int64_t>{2, 1}));
  using Nested = std::pair<Tensor, std::vector<std::string>>;
  two.arg_dims = {0};
  auto nested = scatter_value(Nested{x, {"a", "b", "c", "d", "e"}}, two);
  EXPECT_EQ(nested[1].second, (std::vector<std::string>{"d", "e"}));
  EXPECT_EQ(nested[1].first.sizes(), Shape({2, 2}));
  // std::nullopt: the whole value on every replica's device (vectors included).
  two.arg_dims = {0, std::nullopt, std::nullopt};
  const Tensor mask = randn({3, 3});
  auto whole = scatter_args(std::make_tuple(x, mask, lengths), two);
  EXPECT_TRUE(equal(std::get<1>(whole[1]).cpu(), mask));
  EXPECT_EQ(std::get<1>(whole[1]).device(), Device::cpu(1));
  EXPECT_EQ(std::get<2>(whole[1]), lengths);
  // The gathered vector of an output with an out_dim is the concatenation of the runs.
  std::vector<std::pair<Tensor, std::vector<int64_t>>> outs{{randn({3}), {5, 4, 3}}, {randn({2}), {2, 1}}};
  auto g = gather_outputs(outs, Device::cpu(), 0, {0, 0});
  EXPECT_EQ(g.second, lengths);
  EXPECT_EQ(g.first.sizes(), Shape({5}));
}

// A tensor that is not batched (in_dim std::nullopt) reaches every replica whole, and its gradient
// is the sum of the replicas'.
struct Scaled : nn::Module {
  nn::Linear fc{nullptr};
  Scaled() { fc = register_module("fc", nn::Linear(4, 4)); }
  Tensor forward(const Tensor& x, const Tensor& scale) { return fc(x) * scale; }
};

TEST_F(DPSequences, AWholeTensorArgumentIsDifferentiable) {
  manual_seed(51);
  auto model = std::make_shared<Scaled>();
  Tensor x = randn({6, 4}), scale = randn({4}).requires_grad_();
  model->forward(x, scale).pow(2).sum().backward();
  const Tensor expect = scale.grad().clone();
  scale.set_grad(Tensor());
  model->to(Device::cpu(0));
  nn::DataParallel<Scaled> net(model, DataParallelOptions(cpu_devices(3)).in_dims({0, std::nullopt}));
  net(x, scale).pow(2).sum().backward();
  EXPECT_TRUE(allclose(scale.grad(), expect, 1e-5, 1e-6));
}

// Each replica pads to its own longest sequence: PyTorch's FAQ mistake.
struct PadsPerReplica : nn::Module {
  nn::Linear fc{nullptr};
  PadsPerReplica() { fc = register_module("fc", nn::Linear(3, 4)); }
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& lengths) {  // x [B, T, 3], batch first
    const int64_t longest = lengths.max().item<int64_t>();
    Tensor out = fc(x.narrow(1, 0, longest));
    return {out.sum(-1), out};
  }
};

TEST_F(DPSequences, OutputsPaddedPerReplicaAreANamedGatherError) {
  auto model = std::make_shared<PadsPerReplica>();
  model->to(Device::cpu(0));
  nn::DataParallel<PadsPerReplica> net(model, cpu_devices(2));
  const Tensor x = randn({6, 7, 3}), lengths = tensor<int64_t>({7, 3, 2, 2, 1, 2});
  expect_error<ShapeError>([&] { net(x, lengths); }, {"DataParallel gather of output.get<0>()", "[3, 7], [3, 2]", "gather dim (dim 0)",
                                                      "pad_packed_sequence", "total_length = padded.size(1)"});
  // With out_dims the position names the option.
  nn::DataParallel<PadsPerReplica> dims(model, DataParallelOptions(cpu_devices(2)).out_dims({0, 0}));
  expect_error<ShapeError>([&] { dims(x, lengths); }, {"output.get<0>()", "(out_dims[0] = 0)"});
}

TEST_F(DPSequences, BadPerArgumentDimsAreNamedErrors) {
  RnnBatch b;
  auto model = masked_rnn();
  model->to(Device::cpu(0));
  auto net_with = [&](DataParallelOptions o) { return nn::DataParallel<MaskedRnn>(model, o.device_ids(cpu_devices(2))); };
  const Tensor lengths = tensor<int64_t>(b.lengths);
  auto range = net_with(DataParallelOptions().in_dims({1, 1, 1}));
  expect_error<IndexError>([&] { range(b.x, lengths, b.h0); }, {"dim 1 is out of range for a tensor of size [7]", "argument 1 (in_dims[1] = 1)"});
  auto count = net_with(DataParallelOptions().in_dims({1, 0}));
  expect_error<ValueError>([&] { count(b.x, lengths, b.h0); }, {"in_dims has 2 entries but forward was called with 3 arguments"});
  auto batch = net_with(DataParallelOptions().in_dims({1, 0, 2}));
  expect_error<ShapeError>([&] { batch(b.x, lengths, b.h0); }, {"argument 2 (in_dims[2] = 2) (a tensor of size [1, 7, 5], along dim 2) has 5 rows",
                                                                "argument 0 (in_dims[0] = 1)", "has 7"});
  auto short_vector = net_with(DataParallelOptions().in_dims({1, 0, 1}));
  expect_error<ShapeError>([&] { short_vector(b.x, std::vector<int64_t>{6, 2, 5}, b.h0); }, {"a std::vector of 3 values", "has 7"});
  auto outs = net_with(DataParallelOptions().in_dims({1, 0, 1}).out_dims({1}));
  expect_error<ValueError>([&] { outs(b.x, lengths, b.h0); }, {"out_dims has 1 entries but the forward returns 2 elements"});
  auto out_range = net_with(DataParallelOptions().in_dims({1, 0, 1}).out_dims({1, 3}));
  expect_error<IndexError>([&] { out_range(b.x, lengths, b.h0); }, {"output.get<1>()", "out_dims[1] = 3 is out of range", "[1, 4, 5]"});
}

}  // namespace
}  // namespace dp::parallel
