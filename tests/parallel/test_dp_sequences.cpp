// DataParallel and DistributedDataParallel with the models of sequence work: tied weights (a GPT's
// embedding and head) give one-device gradients on 2 CPU devices and 2 DDP ranks.
#include <gtest/gtest.h>
#include <string>
#include <vector>
#include "distributed/ddp_test_support.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/dp.h"
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

}  // namespace
}  // namespace dp::parallel
