// DataParallel and replicate() with the parameter containers (ParameterList, ParameterDict,
// ModuleDict): the replicas' container parameters equal the originals and carry gradient history,
// and a container that grows between steps is followed.
#include <gtest/gtest.h>
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"
#include "support/devices.h"
#include "support/test_models.h"

namespace dp::parallel {
namespace {

using test::ContainerModel;
using test::cpu_devices;

class DpModuleTypes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(3); }
};

void expect_replica_of(const Tensor& replica, const Tensor& original, Device device, const std::string& what) {
  SCOPED_TRACE(what + " on " + device.str());
  EXPECT_FALSE(replica.is_same(original));
  EXPECT_EQ(replica.device(), device);
  EXPECT_TRUE(equal(replica.to(Device::cpu()), original.to(Device::cpu())));
  EXPECT_TRUE(replica.requires_grad());
  EXPECT_FALSE(replica.is_leaf());
  EXPECT_NE(replica.grad_fn(), nullptr);
}

TEST_F(DpModuleTypes, ReplicasOfContainersEqualTheOriginalsAndCarryHistory) {
  manual_seed(5);
  auto model = std::make_shared<ContainerModel>();
  model->to("cpu:0");
  auto reps = replicate(model, cpu_devices(3));
  ASSERT_EQ(reps.size(), 3u);
  for (size_t j = 0; j < reps.size(); ++j) {
    const Device d = Device::cpu(static_cast<int>(j));
    auto& r = *reps[j];
    EXPECT_NE(r.scales.get(), model->scales.get());
    EXPECT_NE(r.gates.get(), model->gates.get());
    EXPECT_NE(r.heads.get(), model->heads.get());
    EXPECT_EQ(r.named_parameters().keys(), model->named_parameters().keys());
    ASSERT_EQ(r.scales->size(), 2u);
    for (int64_t i = 0; i < 2; ++i) expect_replica_of(r.scales->at(i), model->scales->at(i), d, "scales." + std::to_string(i));
    for (const std::string key : {"input", "output"}) expect_replica_of(r.gates->get(key), model->gates->get(key), d, "gates." + key);
    expect_replica_of(r.heads->at<nn::LinearImpl>("cls")->weight, model->heads->at<nn::LinearImpl>("cls")->weight, d, "heads.cls.weight");
    auto hidden = r.heads->at<nn::SequentialImpl>("hidden");
    EXPECT_NE(hidden.get(), model->heads->at<nn::SequentialImpl>("hidden").get());
    expect_replica_of(hidden->ptr<nn::LinearImpl>(0)->bias, model->heads->at<nn::SequentialImpl>("hidden")->ptr<nn::LinearImpl>(0)->bias, d,
                      "heads.hidden.0.bias");
    // The replica's lookups and its registry agree.
    EXPECT_TRUE(r.gates->get("input").is_same(r.named_parameters()["gates.input"]));
  }
}

TEST_F(DpModuleTypes, ContainerGradientsUnderDataParallelEqualTheSingleDeviceRun) {
  manual_seed(6);
  auto model = std::make_shared<ContainerModel>();
  model->to(kFloat64);
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel<ContainerModel> net(model, cpu_devices(3), Device::cpu());
  Tensor x = randn({7, 8}, kFloat64);  // chunks 3, 3, 1
  Tensor y = net(x);
  Tensor y_ref = reference->forward(x);
  ASSERT_TRUE(allclose(y, y_ref, 1e-12, 1e-12));
  y.pow(2).sum().backward();
  y_ref.pow(2).sum().backward();
  auto got = model->named_parameters();
  auto want = reference->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].value().grad().defined()) << got[i].key();
    EXPECT_TRUE(allclose(got[i].value().grad().cpu(), want[i].value().grad(), 1e-12, 1e-12)) << got[i].key();
  }
}

// A ParameterList whose every element scales the output: growing it between steps changes the
// module's structure, which DataParallel notices (replicas rebuilt, the new parameter trained).
struct GrowingModel : nn::Module {
  nn::Linear fc{nullptr};
  nn::ParameterList scales{nullptr};
  GrowingModel() {
    fc = register_module("fc", nn::Linear(4, 3));
    scales = register_module("scales", nn::ParameterList(randn({3})));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = fc(x);
    for (const auto& item : *scales) h = h * item.value();
    return h;
  }
};

TEST_F(DpModuleTypes, AParameterListGrowingBetweenStepsIsFollowed) {
  manual_seed(7);
  auto model = std::make_shared<GrowingModel>();
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel<GrowingModel> net(model, cpu_devices(2), Device::cpu());
  Tensor x = randn({6, 4});
  net(x).sum().backward();
  EXPECT_EQ(net->replica_builds(), 2);
  Tensor extra = randn({3});
  model->scales->append(extra.to("cpu:0"));
  reference->scales->append(extra.clone());
  model->zero_grad();
  Tensor y = net(x);
  EXPECT_EQ(net->replica_builds(), 4);  // rebuilt once per device for the new structure
  Tensor y_ref = reference->forward(x);
  ASSERT_TRUE(allclose(y, y_ref, 1e-5, 1e-6));
  y.sum().backward();
  y_ref.sum().backward();
  ASSERT_TRUE(model->scales->at(1).grad().defined());
  EXPECT_TRUE(allclose(model->scales->at(1).grad().cpu(), reference->scales->at(1).grad(), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(model->scales->at(0).grad().cpu(), reference->scales->at(0).grad(), 1e-5, 1e-6));
}

}  // namespace
}  // namespace dp::parallel
