// The loss computed on the replicas (DataParallel::forward_loss): the same loss and gradients as
// the criterion on the gathered output, for every built-in loss and for user criteria.
#include <gtest/gtest.h>
#include "dp/dp.h"
#include "support/devices.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"

namespace dp::parallel {
namespace {

class ParallelLoss : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

struct Model : nn::Module {
  nn::Linear fc{nullptr};
  explicit Model(int64_t out) { fc = register_module("fc", nn::Linear(6, out)); }
  Tensor forward(const Tensor& x) { return fc(x); }
};

using test::cpu_devices;

// forward_loss on `devices` vs criterion(model(x), target) on the host.
template <typename Criterion>
void expect_same(Criterion criterion, int64_t outputs, const Tensor& target, int devices, const char* what, int64_t rows = 11) {
  SCOPED_TRACE(std::string(what) + " on " + std::to_string(devices) + " devices");
  manual_seed(11);
  auto model = std::make_shared<Model>(outputs);
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, DataParallelOptions(cpu_devices(devices)).output_device(Device::cpu()));
  Tensor x = randn({rows, 6});
  Tensor loss = net->forward_loss(criterion, target, x);
  Tensor loss_ref = criterion(reference->forward(x), target);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.device(), Device::cpu());
  EXPECT_TRUE(allclose(loss, loss_ref, 1e-5, 1e-6)) << loss.item<float>() << " vs " << loss_ref.item<float>();
  loss.backward();
  loss_ref.backward();
  EXPECT_TRUE(allclose(model->fc->weight.grad().cpu(), reference->fc->weight.grad(), 1e-4, 1e-6));
  EXPECT_TRUE(allclose(model->fc->bias.grad().cpu(), reference->fc->bias.grad(), 1e-4, 1e-6));
}

TEST_F(ParallelLoss, BuiltInLossesEqualTheFullBatchLoss) {
  for (int devices : {1, 2, 3, 4}) {
    manual_seed(1);
    Tensor classes = randint(0, 5, {11});
    Tensor probs = rand({11, 5});
    Tensor weight = rand({5}) + 0.5;
    Tensor with_ignored = classes.clone();
    with_ignored.narrow(0, 0, 4).fill_(2);  // class 2 is ignored below: chunks get uneven counts
    expect_same(nn::CrossEntropyLoss(), 5, classes, devices, "cross entropy");
    expect_same(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().weight(weight).ignore_index(2)), 5, with_ignored, devices,
                "cross entropy, class weights and ignore_index");
    expect_same(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().label_smoothing(0.2)), 5, classes, devices, "cross entropy, label smoothing");
    expect_same(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().reduction(Reduction::Sum)), 5, classes, devices, "cross entropy, sum");
    expect_same(nn::NLLLoss(nn::NLLLossOptions().weight(weight)), 5, classes, devices, "nll, class weights");
    expect_same(nn::MSELoss(), 5, probs, devices, "mse");
    expect_same(nn::L1Loss(nn::L1LossOptions(Reduction::Sum)), 5, probs, devices, "l1, sum");
    expect_same(nn::BCEWithLogitsLoss(nn::BCEWithLogitsLossOptions().pos_weight(weight)), 5, probs, devices, "bce with logits, pos_weight");
  }
}

TEST_F(ParallelLoss, BceOnProbabilities) {
  struct Prob : nn::Module {
    nn::Linear fc{nullptr};
    Prob() { fc = register_module("fc", nn::Linear(6, 1)); }
    Tensor forward(const Tensor& x) { return fc(x).sigmoid(); }
  };
  manual_seed(2);
  auto model = std::make_shared<Prob>();
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel<Prob> net(model, cpu_devices(2));
  Tensor x = randn({30, 6});
  Tensor y = rand({30, 1}).gt(0.5).to(kFloat32);
  nn::BCELoss bce;
  Tensor loss = net->forward_loss(bce, y, x);
  EXPECT_TRUE(allclose(loss.cpu(), bce(reference->forward(x), y), 1e-5, 1e-6));
}

TEST_F(ParallelLoss, UserCriteria) {
  Tensor target = rand({10, 3});
  // A Tensor-returning criterion is a mean over its slice's rows.
  expect_same([](const Tensor& out, const Tensor& t) { return (out - t).pow(2).sum({1}).mean(); }, 3, target, 3, "row-mean lambda", 10);
  // A LossPart gives the exact rule: here a mean over elements.
  auto part = [](const Tensor& out, const Tensor& t) { return LossPart{(out - t).abs().sum(), full({}, static_cast<double>(out.numel()))}; };
  manual_seed(3);
  auto model = std::make_shared<Model>(3);
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(4));
  Tensor x = randn({10, 6});
  Tensor loss = net->forward_loss(part, target, x);
  EXPECT_TRUE(allclose(loss.cpu(), (reference->forward(x) - target).abs().mean(), 1e-5, 1e-6));
}

TEST_F(ParallelLoss, UnreducedLossesAreRefused) {
  auto model = std::make_shared<Model>(5);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(2));
  nn::CrossEntropyLoss none(nn::CrossEntropyLossOptions().reduction(Reduction::None));
  EXPECT_THROW(net->forward_loss(none, randint(0, 5, {4}), randn({4, 6})), ValueError);
}

TEST_F(ParallelLoss, TheOutputDeviceHoldsOnlyScalars) {
  // The point of the parallel loss: no [B, C] output is gathered anywhere.
  struct Big : nn::Module {
    nn::Linear fc{nullptr};
    std::shared_ptr<std::atomic<int64_t>> largest = std::make_shared<std::atomic<int64_t>>(0);
    Big() { fc = register_module("fc", nn::Linear(6, 1000)); }
    Tensor forward(const Tensor& x) {
      Tensor y = fc(x);
      int64_t n = y.numel(), cur = largest->load();
      while (n > cur && !largest->compare_exchange_weak(cur, n)) {
      }
      return y;
    }
  };
  auto model = std::make_shared<Big>();
  model->to("cpu:0");
  nn::DataParallel<Big> net(model, cpu_devices(4));
  nn::CrossEntropyLoss ce;
  Tensor loss = net->forward_loss(ce, randint(0, 1000, {64}), randn({64, 6}));
  EXPECT_EQ(loss.numel(), 1);
  EXPECT_EQ(model->largest->load(), 16 * 1000);  // each replica saw a quarter of the batch
  loss.backward();
  EXPECT_TRUE(model->fc->weight.grad().defined());
}

TEST_F(ParallelLoss, NoDeviceAndSingleDevicePaths) {
  manual_seed(4);
  auto model = std::make_shared<Model>(5);
  auto reference = nn::clone(model);
  Tensor x = randn({7, 6});
  Tensor t = randint(0, 5, {7});
  nn::CrossEntropyLoss ce;
  nn::DataParallel<Model> plain(model);  // no CUDA: the no-device path
  EXPECT_TRUE(allclose(plain->forward_loss(ce, t, x), ce(reference->forward(x), t), 1e-6, 1e-7));
  nn::DataParallel<Model> one(model, std::vector<Device>{Device("cpu:2")});
  Tensor l = one->forward_loss(ce, t, x);
  EXPECT_EQ(l.device(), Device("cpu:2"));
  EXPECT_TRUE(allclose(l.cpu(), ce(reference->forward(x), t), 1e-6, 1e-7));
}

}  // namespace
}  // namespace dp::parallel
