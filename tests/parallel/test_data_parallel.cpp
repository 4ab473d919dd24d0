// DataParallel's behaviours, point by point as in ../shared/spec/dataparallel.md.
#include <gtest/gtest.h>
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"

namespace dp::parallel {
namespace {

struct Model : nn::Module {
  nn::Linear fc{nullptr};
  Model(int64_t in, int64_t out) { fc = register_module("fc", nn::Linear(in, out)); }
  Tensor forward(const Tensor& x) { return fc(x); }
};

class DataParallelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

TEST_F(DataParallelTest, OutputAndGradientsEqualSingleDevice) {
  manual_seed(0);
  auto model = std::make_shared<Model>(5, 2);
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, {"cpu:0", "cpu:1"});
  Tensor x = randn({30, 5});
  Tensor y = net(x);
  EXPECT_EQ(y.sizes(), Shape({30, 2}));
  EXPECT_EQ(y.device(), Device("cpu:0"));
  Tensor y_ref = reference->forward(x);
  EXPECT_TRUE(allclose(y.to(Device::cpu()), y_ref, 1e-6, 1e-6));
  y.pow(2).sum().backward();
  y_ref.pow(2).sum().backward();
  EXPECT_TRUE(allclose(model->fc->weight.grad().cpu(), reference->fc->weight.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(model->fc->bias.grad().cpu(), reference->fc->bias.grad(), 1e-5, 1e-6));
}

}  // namespace
}  // namespace dp::parallel
