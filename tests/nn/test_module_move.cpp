// Moving a module (Module::to) while a graph made before the move is still alive, as PyTorch
// (tests/golden/gen_module_move.py): a graph made after the move trains on the new device; the
// old graph keeps delivering gradients as they were computed (on the old device, in the old
// dtype) into the same parameters' .grad. Directly and through DataParallel.
//
// PyTorch's Module.to moves parameters with set_data, which forgets the parameter's cached
// AccumulateGrad node when the device or dtype changes. The golden cases move the dtype (a CPU-only
// PyTorch has one device; the dtype takes the same path) and are checked here for the dtype move
// exactly, and for the device move by their values and the devices the gradients land on. Where
// the old graph's gradient (old device) meets a .grad already on the new device, the accumulation
// `grad += new_grad` mixes two devices: PyTorch raises there (CUDA's "Expected all tensors to be
// on the same device"), and so does dparallel; in the dtype cases it succeeds in both.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <functional>
#include "dp/core/device_registry.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"
#include "support/golden.h"
#include "support/golden_linear.h"

namespace dp::nn {
namespace {

using test::load_linear;
using test::matrix;

using test::all_close;
using test::golden_file;
using test::json;
using test::tensor_from_json;

class ModuleMove : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(3); }
};

const json& golden() { return golden_file("module_move.json"); }

struct Model : Module {
  Linear fc{nullptr};
  Model() {
    fc = register_module("fc", Linear(3, 2));
    load_linear(fc, golden());
  }
  Tensor forward(const Tensor& x) { return fc(x); }
};

Tensor loss(const Tensor& y) { return (y * matrix(golden()["C"], y.dtype()).to(y.device())).sum(); }
Tensor input(Device d, DType dtype = kFloat32) { return matrix(golden()["X"], dtype).to(d); }

const json& steps(const std::string& name) {
  for (const auto& c : golden()["cases"])
    if (c["name"] == name) return c["steps"];
  throw std::runtime_error("no case " + name);
}

// The gradients and where they are.
void expect_grads(const Model& m, const json& expected, Device device, bool check_dtype = false) {
  const Tensor gw = m.fc->weight.grad(), gb = m.fc->bias.grad();
  ASSERT_TRUE(gw.defined() && gb.defined());
  EXPECT_EQ(gw.device(), device);
  EXPECT_EQ(gb.device(), device);
  if (check_dtype) {
    EXPECT_EQ(dtype_name(gw.dtype()), expected["weight_grad"]["dtype"].get<std::string>());
    EXPECT_EQ(dtype_name(gb.dtype()), expected["bias_grad"]["dtype"].get<std::string>());
  }
  EXPECT_TRUE(all_close(gw.cpu(), expected["weight_grad"], 0, 0));  // small dyadic values: exact
  EXPECT_TRUE(all_close(gb.cpu(), expected["bias_grad"], 0, 0));
}

// PyTorch's error for `grad += new_grad` across devices.
void expect_two_devices(const std::function<void()>& fn) {
  EXPECT_THAT(fn, ::testing::ThrowsMessage<DeviceError>(
                      ::testing::HasSubstr("expected all tensors to be on the same device, but found at least two devices")));
}

TEST_F(ModuleMove, NewGraphAfterAMoveTrainsOnTheNewDevice) {
  auto m = std::make_shared<Model>();
  m->to("cpu:1");
  Tensor y_old = m->forward(input("cpu:1"));  // the old graph, alive
  m->to("cpu:0");
  loss(m->forward(input("cpu:0"))).backward();  // was: AddmmBackward0 ... expected device cpu:1 but got cpu:0
  expect_grads(*m, golden()["plain"], "cpu:0");
  // Again: the new graph's accumulator is reused and the gradient sums on cpu:0.
  loss(m->forward(input("cpu:0"))).backward();
  expect_grads(*m, steps("new_then_old")[1], "cpu:0");
  EXPECT_EQ(m->fc->weight.device(), Device("cpu:0"));
}

TEST_F(ModuleMove, OldGraphDeliversOnTheOldDevice) {
  auto m = std::make_shared<Model>();
  m->to("cpu:1");
  Tensor y_old = m->forward(input("cpu:1"));
  m->to("cpu:0");
  // .grad is empty: the old graph's gradient becomes it, on cpu:1 (PyTorch: the old device).
  loss(y_old).backward();
  expect_grads(*m, steps("old_then_new")[0], "cpu:1");
  EXPECT_EQ(m->fc->weight.device(), Device("cpu:0"));
  // The new graph's gradient (cpu:0) cannot be added to a .grad on cpu:1, as in PyTorch.
  expect_two_devices([&] { loss(m->forward(input("cpu:0"))).backward(); });
  // Reset the gradients and training continues on cpu:0.
  m->zero_grad();
  loss(m->forward(input("cpu:0"))).backward();
  expect_grads(*m, golden()["plain"], "cpu:0");
}

TEST_F(ModuleMove, OldGraphAfterTheNewOneMeetsAGradOnTheNewDevice) {
  auto m = std::make_shared<Model>();
  m->to("cpu:1");
  Tensor y_old = m->forward(input("cpu:1"));
  m->to("cpu:0");
  loss(m->forward(input("cpu:0"))).backward();
  expect_grads(*m, steps("new_then_old")[0], "cpu:0");
  // PyTorch's `grad += new_grad` across two devices raises; so does dparallel.
  expect_two_devices([&] { loss(y_old).backward(); });
}

TEST_F(ModuleMove, OldGraphWithAnInputThatRequiresGrad) {
  auto m = std::make_shared<Model>();
  m->to("cpu:1");
  Tensor x = input("cpu:1").requires_grad_(true);
  Tensor y_old = m->forward(x);
  m->to("cpu:0");
  loss(y_old).backward();
  const json& expected = steps("old_graph_input_grad")[0];
  expect_grads(*m, expected, "cpu:1");
  EXPECT_EQ(x.grad().device(), Device("cpu:1"));
  EXPECT_TRUE(all_close(x.grad().cpu(), expected["input_grad"], 0, 0));
}

// The dtype move: the golden cases exactly, dtypes of the gradients included.
TEST_F(ModuleMove, DtypeMoveMatchesPyTorch) {
  for (const std::string order : {"new_then_old", "old_then_new"}) {
    SCOPED_TRACE(order);
    auto m = std::make_shared<Model>();
    Tensor y_old = m->forward(input(Device::cpu()));
    m->to(kFloat64);
    const json& expected = steps(order);
    for (size_t k = 0; k < 2; ++k) {
      const bool new_graph = (order == "new_then_old") == (k == 0);
      if (new_graph)
        loss(m->forward(input(Device::cpu(), kFloat64))).backward();
      else
        loss(y_old).backward();
      expect_grads(*m, expected[k], Device::cpu(), /*check_dtype=*/true);
    }
    EXPECT_EQ(m->fc->weight.dtype(), kFloat64);
  }
}

// Where the old graph needs the moved parameter itself (the input's gradient needs the weight),
// PyTorch's Linear still has the old values (it saved a view, weight.t(), that keeps them); a
// dparallel op saves the parameter, whose data the move replaced. When the replaced data differs
// (another dtype here; or the parameter was changed in place before the move, which its version
// counter shows) backward says so instead of computing with the new data. (Above, the move between
// CPU devices copied the same float32 values and the version is unchanged: that works.)
TEST_F(ModuleMove, OldGraphNeedingTheMovedParameterIsAClearError) {
  auto m = std::make_shared<Model>();
  Tensor x = input(Device::cpu()).requires_grad_(true);
  Tensor y_old = m->forward(x);
  m->to(kFloat64);
  EXPECT_THAT([&] { loss(y_old).backward(); },
              ::testing::ThrowsMessage<AutogradError>(::testing::HasSubstr("was given new data after it was saved: [torch.DoubleTensor [2, 3]]")));
  // A parameter never changed in place (version 0 before and after the move): the saved tensor
  // now has another dtype, which the backward refuses rather than reading it as the old one.
  struct Raw : Module {
    Tensor w;
    Raw() { w = register_parameter("w", matrix(golden()["W"])); }
  } raw;
  Tensor x2 = input(Device::cpu()).requires_grad_(true);
  Tensor y2 = linear(x2, raw.w);
  raw.to(kFloat64);
  EXPECT_THROW(loss(y2).backward(), DTypeError);
  // A new graph works.
  Tensor x3 = input(Device::cpu(), kFloat64).requires_grad_(true);
  loss(linear(x3, raw.w)).backward();
  EXPECT_TRUE(all_close(raw.w.grad(), golden()["plain"]["weight_grad"], 0, 0));
}

// The same through DataParallel: replicas of the model on cpu:1 and cpu:2, the model moved to cpu:0
// and wrapped again over cpu:0 and cpu:1.
TEST_F(ModuleMove, DataParallelAfterAMove) {
  auto m = std::make_shared<Model>();
  m->to("cpu:1");
  DataParallel<Model> before(m, std::vector<Device>{"cpu:1", "cpu:2"});
  Tensor y_old = before(input(Device::cpu()));
  m->to("cpu:0");
  DataParallel<Model> after(m, std::vector<Device>{"cpu:0", "cpu:1"});
  loss(after(input(Device::cpu()))).backward();
  expect_grads(*m, golden()["plain"], "cpu:0");
  // The old graph meets .grad on cpu:0 with gradients summed on cpu:1: an error, as above.
  expect_two_devices([&] { loss(y_old).backward(); });

  // Old graph first: its full-batch gradient lands on cpu:1, the old device.
  auto m2 = std::make_shared<Model>();
  m2->to("cpu:1");
  DataParallel<Model> before2(m2, std::vector<Device>{"cpu:1", "cpu:2"});
  Tensor y_old2 = before2(input(Device::cpu()));
  m2->to("cpu:0");
  loss(y_old2).backward();
  expect_grads(*m2, golden()["plain"], "cpu:1");
  m2->zero_grad();
  DataParallel<Model> after2(m2, std::vector<Device>{"cpu:0", "cpu:1"});
  loss(after2(input(Device::cpu()))).backward();
  expect_grads(*m2, golden()["plain"], "cpu:0");
}

// A single-device DataParallel moves the module itself (as PyTorch's does) while the graph of the
// previous wrapper lives.
TEST_F(ModuleMove, SingleDeviceDataParallelMovesTheModule) {
  auto m = std::make_shared<Model>();
  DataParallel<Model> first(m, std::vector<Device>{"cpu:1"});
  Tensor y_old = first(input("cpu:1"));
  DataParallel<Model> second(m, std::vector<Device>{"cpu:0"});
  EXPECT_EQ(m->fc->weight.device(), Device("cpu:0"));
  loss(second(input("cpu:0"))).backward();
  expect_grads(*m, golden()["plain"], "cpu:0");
}

}  // namespace
}  // namespace dp::nn
