// Hardening (docs/hardening.md): an error thrown in the backward of a node that a DataParallel
// replica's forward created carries "in replica i on device d", as forward errors do, with its type
// kept; the next step works; nodes made outside replicas are not annotated.
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include "dp/autograd/function.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"
#include "support/devices.h"

namespace dp::parallel {
namespace {

class DataParallelBackwardErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

// Linear, then an identity whose backward throws a ValueError on `bad_device` while *fail is set.
struct FailsInBackward : nn::Module {
  nn::Linear fc{nullptr};
  std::shared_ptr<bool> fail = std::make_shared<bool>(true);
  Device bad_device{"cpu:2"};
  FailsInBackward() { fc = register_module("fc", nn::Linear(2, 2)); }
  Tensor forward(const Tensor& x) {
    Tensor h = fc(x);
    Tensor out = h.detach().clone();
    auto fail_flag = fail;
    const Device bad = bad_device;
    const Device here = x.device();
    autograd::record("FlakyBackward", {h}, {out}, [fail_flag, bad, here](autograd::variable_list&& g) -> autograd::variable_list {
      if (*fail_flag && here == bad) throw ValueError("flaky gradient on " + here.str());
      return {g[0]};
    });
    return out;
  }
};

TEST_F(DataParallelBackwardErrors, BackwardErrorNamesTheReplicaAndDevice) {
  auto m = std::make_shared<FailsInBackward>();
  m->to("cpu:0");
  nn::DataParallel<FailsInBackward> net(m, test::cpu_devices(3));
  Tensor y = net(randn({6, 2}));
  try {
    y.sum().backward();
    FAIL() << "backward should have failed";
  } catch (const ValueError& e) {  // the type is kept
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Caught dp::ValueError in replica 2 on device cpu:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("FlakyBackward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("flaky gradient on cpu:2"), std::string::npos) << msg;
  }
  *m->fail = false;
  m->zero_grad();
  Tensor y2 = net(randn({6, 2}));
  y2.sum().backward();
  EXPECT_TRUE(m->fc->weight.grad().defined());
}

TEST_F(DataParallelBackwardErrors, NodesOutsideReplicasAreNotAnnotated) {
  auto m = std::make_shared<FailsInBackward>();
  m->bad_device = Device::cpu();
  try {
    m->forward(randn({3, 2})).sum().backward();  // no DataParallel: the host
    FAIL() << "backward should have failed";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find("in replica"), std::string::npos) << msg;
    EXPECT_EQ(msg, "flaky gradient on cpu");
  }
}

TEST_F(DataParallelBackwardErrors, ForwardErrorsKeepTheirFormat) {
  struct FailsInForward : nn::Module {
    Tensor forward(const Tensor& x) {
      if (x.device() == Device("cpu:1")) throw IndexError("no such row");
      return x;
    }
  };
  auto m = std::make_shared<FailsInForward>();
  nn::DataParallel<FailsInForward> net(m, test::cpu_devices(2));
  try {
    net(randn({4, 2}));
    FAIL();
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("Caught dp::IndexError in replica 1 on device cpu:1 (replica 1 of 2 got rows 2..3 of a batch of 4 "
                                         "split along dim 0).\nOriginal message: no such row"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dp::parallel
