// DataParallel and replicate() with the parameter containers (ParameterList, ParameterDict,
// ModuleDict): the replicas' container parameters equal the originals and carry gradient history,
// and a container that grows between steps is followed. With lazy modules (LazyLinear): an
// uninitialised one is refused with PyTorch's message (tests/golden/gen_lazy.py) before any
// replica exists, and after a dummy forward DataParallel trains it like any module.
#include <gtest/gtest.h>
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"
#include "support/devices.h"
#include "support/golden.h"
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

struct LazyModel : nn::Module {
  nn::Linear pre{nullptr};
  nn::Sequential body{nullptr};
  LazyModel() {
    pre = register_module("pre", nn::Linear(5, 6));
    body = register_module("body", nn::Sequential(nn::Tanh(), nn::LazyLinear(3)));
  }
  Tensor forward(const Tensor& x) { return body->forward(pre(x)); }
};

std::string pytorch_refusal() { return test::golden_case("lazy.json", "lazy_linear")["message"].get<std::string>(); }

template <typename F>
void expect_refused(F&& call, const char* what) {
  SCOPED_TRACE(what);
  try {
    call();
    FAIL() << "expected the uninitialized module to be refused";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(pytorch_refusal(), 0), 0u) << msg;  // PyTorch's message, then which module
    EXPECT_NE(msg.find("'body.1', a LazyLinear"), std::string::npos) << msg;
  }
}

TEST_F(DpModuleTypes, UninitializedLazyModulesAreRefusedUntilADummyForward) {
  manual_seed(8);
  auto model = std::make_shared<LazyModel>();
  model->to("cpu:0");
  nn::DataParallel<LazyModel> net(model, cpu_devices(2), Device::cpu());
  Tensor x = randn({6, 5});
  expect_refused([&] { net(x); }, "DataParallel");
  EXPECT_EQ(net->replica_builds(), 0);  // refused before any replica was made
  EXPECT_TRUE(model->body->ptr<nn::LazyLinearImpl>(1)->has_uninitialized_params());
  expect_refused([&] { replicate(model, cpu_devices(2)); }, "replicate");
  expect_refused([&] { data_parallel(model, x, cpu_devices(2)); }, "data_parallel");
  // A lone lazy module is named as the module itself.
  auto lone = nn::LazyLinear(2).ptr();
  lone->to("cpu:0");
  try {
    replicate(lone, cpu_devices(2));
    FAIL() << "expected a refusal";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("(uninitialized: the module itself, a LazyLinear)"), std::string::npos) << e.what();
  }

  // The dummy forward (on the module, on device_ids[0]) initialises it; then DataParallel works
  // and its gradients equal the single-device run's.
  model->forward(x.narrow(0, 0, 1).to("cpu:0"));
  auto reference = nn::clone(model);
  reference->to(Device::cpu());
  Tensor y = net(x);
  EXPECT_EQ(net->replica_builds(), 2);
  Tensor y_ref = reference->forward(x);
  ASSERT_TRUE(allclose(y, y_ref, 1e-5, 1e-6));
  y.pow(2).sum().backward();
  y_ref.pow(2).sum().backward();
  auto got = model->named_parameters();
  auto want = reference->named_parameters();
  ASSERT_EQ(got.keys(), (std::vector<std::string>{"pre.weight", "pre.bias", "body.1.weight", "body.1.bias"}));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(allclose(got[i].value().grad().cpu(), want[i].value().grad(), 1e-5, 1e-6)) << got[i].key();
}

TEST_F(DpModuleTypes, OneDeviceCallsTheLazyModuleDirectlyAsPyTorchDoes) {
  // With a single device DataParallel runs the module itself (no replica), so the first forward
  // initialises it there, as torch.nn.DataParallel does.
  auto model = std::make_shared<LazyModel>();
  nn::DataParallel<LazyModel> net(model, cpu_devices(1));
  Tensor y = net(randn({4, 5}).to("cpu:0"));
  EXPECT_EQ(y.sizes(), (Shape{4, 3}));
  EXPECT_FALSE(model->body->ptr<nn::LazyLinearImpl>(1)->has_uninitialized_params());
  EXPECT_EQ(model->body->ptr<nn::LazyLinearImpl>(1)->weight.device(), Device("cpu:0"));
}

}  // namespace
}  // namespace dp::parallel
