// DataParallel's remaining PyTorch-parity points (docs/data-parallel.md): buffers that require
// grad, zero_grad() on replicas, where parallel_apply's outputs live, and which rows of the batch a
// failing replica got. Golden values: tests/golden/gen_data_parallel.py.
#include <gtest/gtest.h>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "dp/core/warning.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"
#include "support/devices.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp::parallel {
namespace {

using test::all_close;
using test::cpu_devices;
using test::golden_case;
using test::tensor_from_json;

class DataParallelParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

// ---- buffers that require grad ----

// y = tanh(fc(x)) * scale, where `scale` is a buffer registered with requires_grad (the golden
// generator's ScaledNet).
struct ScaledNet : nn::Module {
  nn::Linear fc{nullptr};
  Tensor scale;
  ScaledNet() {
    fc = register_module("fc", nn::Linear(4, 3));
    Tensor s = randn({3});
    s.requires_grad_(true);
    scale = register_buffer("scale", s);
  }
  Tensor forward(const Tensor& x) { return fc(x).tanh() * scale; }
};

std::shared_ptr<ScaledNet> golden_scaled_net() {
  const auto& c = golden_case("data_parallel.json", "buffer_requires_grad");
  auto net = std::make_shared<ScaledNet>();
  NoGradGuard no_grad;
  net->fc->weight.detach().copy_(tensor_from_json(c["params"]["fc.weight"]));
  net->fc->bias.detach().copy_(tensor_from_json(c["params"]["fc.bias"]));
  net->scale.detach().copy_(tensor_from_json(c["params"]["scale"]));
  return net;
}

TEST_F(DataParallelParity, BufferRequiringGradGetsPyTorchsGradientOnAnyDeviceCount) {
  // PyTorch's replicate broadcasts buffers that require grad with autograd, like parameters, so the
  // buffer's gradient through DataParallel is the single-device one. 10 rows: 5,5 / 4,4,2 / 3,3,3,1.
  const auto& c = golden_case("data_parallel.json", "buffer_requires_grad");
  std::map<std::string, Tensor> single_device;
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE("devices: " + std::to_string(n));
    auto net = golden_scaled_net();
    net->to("cpu:0");
    nn::DataParallel<ScaledNet> dp_net(net, cpu_devices(n));
    Tensor x = tensor_from_json(c["input"], /*requires_grad=*/true);
    Tensor y = dp_net(x);
    ASSERT_TRUE(y.requires_grad());
    EXPECT_TRUE(all_close(y.cpu(), c["output"]));
    y.backward(tensor_from_json(c["grad_output"]).to(y.device()));
    ASSERT_TRUE(net->scale.grad().defined());
    const std::map<std::string, Tensor> grads{{"scale", net->scale.grad().cpu()},
                                              {"fc.weight", net->fc->weight.grad().cpu()},
                                              {"fc.bias", net->fc->bias.grad().cpu()},
                                              {"input", x.grad()}};
    for (const auto& [name, g] : grads) {
      EXPECT_TRUE(all_close(g, c["grads"][name], 1e-5, 1e-6)) << name;
      if (n == 1)
        single_device[name] = g;
      else
        EXPECT_TRUE(allclose(g, single_device.at(name), 1e-5, 1e-6)) << name;
    }
  }
}

TEST_F(DataParallelParity, BufferRequiringGradAcrossStepsUpdatesAndToggles) {
  manual_seed(11);
  auto net = std::make_shared<ScaledNet>();
  auto reference = nn::clone(net);
  reference->scale.requires_grad_(true);  // clone() copies buffers without their requires_grad
  net->to("cpu:0");
  nn::DataParallel<ScaledNet> dp_net(net, cpu_devices(3));
  Tensor x = randn({7, 4});
  auto step = [&] {
    net->zero_grad();  // parameters only: the buffer's gradient is cleared by hand
    reference->zero_grad();
    net->scale.set_grad(Tensor());
    reference->scale.set_grad(Tensor());
    Tensor y = dp_net(x);
    Tensor y_ref = reference->forward(x);
    EXPECT_TRUE(allclose(y.cpu(), y_ref, 1e-6, 1e-6));
    EXPECT_EQ(y.requires_grad(), y_ref.requires_grad());
    if (y_ref.requires_grad()) {
      y.pow(2).sum().backward();
      y_ref.pow(2).sum().backward();
    }
  };
  // Kept replicas: the second step refreshes, the buffer's gradient is still summed over replicas.
  for (int i = 0; i < 2; ++i) {
    step();
    ASSERT_TRUE(net->scale.grad().defined());
    EXPECT_TRUE(allclose(net->scale.grad().cpu(), reference->scale.grad(), 1e-5, 1e-6));
  }
  EXPECT_EQ(dp_net->replica_builds(), 3);
  // An in-place update of the buffer reaches every replica.
  {
    NoGradGuard no_grad;
    net->scale.mul_(-2.0);
    reference->scale.mul_(-2.0);
  }
  step();
  EXPECT_TRUE(allclose(net->scale.grad().cpu(), reference->scale.grad(), 1e-5, 1e-6));
  // No longer requiring grad: the replicas are rebuilt, the buffer is a plain buffer again.
  net->scale.requires_grad_(false);
  reference->scale.requires_grad_(false);
  step();
  EXPECT_EQ(dp_net->replica_builds(), 6);
  EXPECT_FALSE(net->scale.grad().defined());
  EXPECT_TRUE(net->fc->weight.grad().defined());
  // And requiring it again.
  net->scale.requires_grad_(true);
  reference->scale.requires_grad_(true);
  step();
  EXPECT_EQ(dp_net->replica_builds(), 9);
  ASSERT_TRUE(net->scale.grad().defined());
  EXPECT_TRUE(allclose(net->scale.grad().cpu(), reference->scale.grad(), 1e-5, 1e-6));
}

TEST_F(DataParallelParity, GradcheckThroughDataParallelWithRespectToTheBuffer) {
  manual_seed(12);
  auto net = std::make_shared<ScaledNet>();
  net->to(Device("cpu:0"), kFloat64);
  ASSERT_TRUE(net->scale.requires_grad());
  nn::DataParallel<ScaledNet> dp_net(net, DataParallelOptions(cpu_devices(3)).output_device(Device::cpu()));
  // f(buffer, x): the buffer's value is the first argument (gradcheck perturbs a copy of it, whose
  // value is copied in). First derivatives only: the copy is not differentiable, so a double
  // backward check of this f would not be one of DataParallel.
  auto f = [&](const std::vector<Tensor>& in) {
    if (!in[0].is_same(net->scale)) {
      NoGradGuard no_grad;
      net->scale.detach().copy_(in[0]);
    }
    return dp_net(in[1]);
  };
  Tensor x = test::rand_leaf({5, 4});  // 2, 2, 1 rows
  EXPECT_TRUE(test::gradcheck(f, {net->scale, x}));
}

TEST_F(DataParallelParity, ReplicateTreatsBuffersThatRequireGradAsParameters) {
  manual_seed(13);
  auto net = std::make_shared<ScaledNet>();
  net->to("cpu:0");
  auto reps = replicate(net, cpu_devices(3));
  for (size_t j = 0; j < reps.size(); ++j) {
    SCOPED_TRACE("replica " + std::to_string(j));
    const Tensor& s = reps[j]->scale;
    EXPECT_EQ(s.device(), Device::cpu(static_cast<int>(j)));
    EXPECT_TRUE(s.requires_grad());
    EXPECT_NE(s.grad_fn(), nullptr);  // a copy with history, not a leaf
    EXPECT_FALSE(s.is_same(net->scale));
    EXPECT_TRUE(equal(s.cpu(), net->scale.detach().cpu()));
  }
  EXPECT_EQ(reps[0]->scale.data_ptr(), net->scale.data_ptr());  // replica 0 reads the original's memory
  for (auto& r : replicate(net, cpu_devices(2), /*detach=*/true)) EXPECT_FALSE(r->scale.requires_grad());
}

// ---- zero_grad() on replicas ----

struct ClearsGrads : nn::Module {
  nn::Linear fc{nullptr};
  ClearsGrads() { fc = register_module("fc", nn::Linear(3, 2)); }
  Tensor forward(const Tensor& x) {
    zero_grad();  // does nothing on a replica (PyTorch warns)
    return fc(x);
  }
};

TEST_F(DataParallelParity, ZeroGradInAReplicaWarnsOncePerReplicaSetAndChangesNothing) {
  const std::string expected = golden_case("data_parallel.json", "replica_zero_grad_warning")["message"].get<std::string>();
  manual_seed(14);
  auto model = std::make_shared<ClearsGrads>();
  model->to("cpu:0");
  nn::DataParallel<ClearsGrads> net(model, cpu_devices(3));
  Tensor x = randn({6, 3});
  WarningCapture capture;
  net(x).sum().backward();  // three replicas call zero_grad() at once: one warning
  ASSERT_EQ(capture.messages().size(), 1u);
  EXPECT_EQ(capture.messages()[0], expected);
  const Tensor g1 = model->fc->weight.grad().clone();
  Tensor y = net(x);  // the replicas' zero_grad() leaves the original's gradients alone
  ASSERT_TRUE(model->fc->weight.grad().defined());
  EXPECT_TRUE(equal(model->fc->weight.grad(), g1));
  y.sum().backward();
  EXPECT_TRUE(allclose(model->fc->weight.grad(), g1 * 2.0, 1e-6, 1e-6));  // accumulated
  net->invalidate_replicas();                                             // rebuilt replicas belong to the same set: no new warning
  for (int i = 0; i < 3; ++i) net(x);
  EXPECT_EQ(capture.messages().size(), 1u);
  nn::DataParallel<ClearsGrads> other(model, cpu_devices(2));  // a new replica set warns once more
  other(x);
  other(x);
  EXPECT_EQ(capture.messages().size(), 2u);
  // The original's own zero_grad() works, silently.
  model->zero_grad();
  EXPECT_FALSE(model->fc->weight.grad().defined());
  EXPECT_EQ(capture.messages().size(), 2u);
}

TEST_F(DataParallelParity, ReplicasAreMarkedAndTheirClonesAreNot) {
  auto model = std::make_shared<ClearsGrads>();
  model->to("cpu:0");
  EXPECT_FALSE(model->is_replica());
  auto reps = replicate(model, cpu_devices(2));
  for (auto& r : reps) {
    EXPECT_TRUE(r->is_replica());
    EXPECT_TRUE(r->fc->is_replica());
  }
  EXPECT_FALSE(nn::clone(reps[1])->is_replica());
  EXPECT_FALSE(model->is_replica());
}

// ---- parallel_apply puts outputs[i] on devices[i] ----

struct Elsewhere : nn::Module {
  nn::Linear fc{nullptr};
  Elsewhere() { fc = register_module("fc", nn::Linear(3, 2)); }
  // Everything it returns is away from its device (the host, cpu:3), one tensor undefined.
  std::pair<Tensor, std::vector<Tensor>> forward(const Tensor& x) {
    Tensor y = fc(x);
    return {y.to(Device::cpu()), {(y * 2).to(Device("cpu:3")), Tensor()}};
  }
};

TEST_F(DataParallelParity, ParallelApplyMovesEachOutputToItsDevice) {
  manual_seed(15);
  auto model = std::make_shared<Elsewhere>();
  auto reference = nn::clone(model);
  model->to("cpu:0");
  const std::vector<Device> devices = cpu_devices(3);
  SplitOptions split;
  split.devices = devices;
  Tensor x = randn({6, 3});
  auto inputs = scatter_args(std::make_tuple(x), split);
  auto outputs = parallel_apply(replicate(model, devices), inputs, devices);
  ASSERT_EQ(outputs.size(), 3u);
  Tensor total;
  for (size_t i = 0; i < outputs.size(); ++i) {
    SCOPED_TRACE("replica " + std::to_string(i));
    const auto& [y, extras] = outputs[i];
    EXPECT_EQ(y.device(), devices[i]);
    ASSERT_EQ(extras.size(), 2u);
    EXPECT_EQ(extras[0].device(), devices[i]);
    EXPECT_FALSE(extras[1].defined());
    const Tensor expected = reference->fc(x.narrow(0, static_cast<int64_t>(2 * i), 2));
    EXPECT_TRUE(allclose(y.cpu(), expected, 1e-6, 1e-6));
    EXPECT_TRUE(allclose(extras[0].cpu(), expected * 2, 1e-6, 1e-6));
    Tensor part = (y.sum() + extras[0].sum()).to("cpu:0");  // the moves are differentiable
    total = total.defined() ? total + part : part;
  }
  total.backward();
  Tensor y_ref = reference->fc(x);
  (y_ref.sum() + (y_ref * 2).sum()).backward();
  EXPECT_TRUE(allclose(model->fc->weight.grad().cpu(), reference->fc->weight.grad(), 1e-5, 1e-6));
  // Through DataParallel the gathered output is on output_device as before.
  nn::DataParallel<Elsewhere> net(model, DataParallelOptions(devices).output_device("cpu:2"));
  auto out = net(x);
  EXPECT_EQ(out.first.device(), Device("cpu:2"));
  EXPECT_EQ(out.second[0].device(), Device("cpu:2"));
  EXPECT_TRUE(allclose(out.first.cpu(), reference->fc(x), 1e-6, 1e-6));
}

// ---- which rows a failing replica got ----

struct FailsOffDeviceZero : nn::Module {
  Tensor w;
  FailsOffDeviceZero() { w = register_parameter("w", ones({1})); }
  Tensor forward(const Tensor& x) {
    if (x.device() == Device("cpu:2")) throw std::out_of_range("index out of range in a slice of size " + x.size_str());
    if (x.device() != Device("cpu:0")) throw ShapeError("unexpected slice of size " + x.size_str());
    return x * w;
  }
};

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

// A user's own subclass of a dparallel error: the context is added to the same object, which comes
// back as itself (its type and its fields), not rebuilt as its dparallel base type.
struct QuotaExceeded : ValueError {
  using ValueError::ValueError;
  int code = 0;
};

struct FailsWithAUserError : nn::Module {
  Tensor w;
  FailsWithAUserError() { w = register_parameter("w", ones({1})); }
  Tensor forward(const Tensor& x) {
    if (x.device() == Device("cpu:1")) {
      QuotaExceeded e("quota exceeded on " + x.device().str());
      e.code = 42;
      throw e;
    }
    return x * w;
  }
};

TEST_F(DataParallelParity, AUsersErrorSubclassComesBackAsItselfWithTheContext) {
  auto model = std::make_shared<FailsWithAUserError>();
  model->to("cpu:0");
  nn::DataParallel<FailsWithAUserError> two(model, cpu_devices(2));
  try {
    two(randn({4, 4}));
    FAIL() << "expected QuotaExceeded";
  } catch (const QuotaExceeded& e) {
    EXPECT_EQ(e.code, 42);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("QuotaExceeded in replica 1 on device cpu:1 (replica 1 of 2 got rows 2..3 of a batch of 4 split along dim 0).\n"
                       "Original message: quota exceeded on cpu:1"),
              std::string::npos)
        << msg;
  }
}

TEST_F(DataParallelParity, ReplicaErrorsSayWhichRowsOfTheBatchTheReplicaGot) {
  auto model = std::make_shared<FailsOffDeviceZero>();
  model->to("cpu:0");
  nn::DataParallel<FailsOffDeviceZero> two(model, cpu_devices(2));
  std::string msg = message_of<ShapeError>([&] { two(randn({30, 4})); });
  EXPECT_NE(msg.find("Caught dp::ShapeError in replica 1 on device cpu:1 (replica 1 of 2 got rows 15..29 of a batch of 30 split along "
                     "dim 0).\nOriginal message: unexpected slice of size [15, 4]"),
            std::string::npos)
      << msg;
  // Several failures: the first by index, its rows, and how many others failed. dim -1 is dim 1.
  nn::DataParallel<FailsOffDeviceZero> four(model, DataParallelOptions(cpu_devices(4)).dim(-1));
  msg = message_of<ShapeError>([&] { four(randn({2, 10})); });  // columns 3,3,3,1
  EXPECT_NE(msg.find("in replica 1 on device cpu:1 (replica 1 of 4 got rows 3..5 of a batch of 10 split along dim 1; 2 other replica(s) "
                     "failed too; the first by index is shown)"),
            std::string::npos)
      << msg;
  // One row, in device order {cpu:0, cpu:2}; a standard exception type is kept.
  nn::DataParallel<FailsOffDeviceZero> skip(model, DataParallelOptions({Device("cpu:0"), Device("cpu:2")}).chunk_sizes({4, 1}));
  msg = message_of<std::out_of_range>([&] { skip(randn({5, 4})); });
  EXPECT_NE(msg.find("Caught std::out_of_range in replica 1 on device cpu:2 (replica 1 of 2 got row 4 of a batch of 5 split along dim 0)."),
            std::string::npos)
      << msg;
  // An empty batch: every replica runs on no rows.
  msg = message_of<ShapeError>([&] { two(randn({0, 4})); });
  EXPECT_NE(msg.find("in replica 1 on device cpu:1 (replica 1 of 2 got no rows of a batch of 0 split along dim 0)."), std::string::npos) << msg;
  // The loss on the replicas (rows counted on the target, split like the inputs) and the functional form.
  auto criterion = [](const Tensor& out, const Tensor& target) { return (out - target).pow(2).mean(); };
  msg = message_of<ShapeError>([&] { two->forward_loss(criterion, randn({6, 4}), randn({6, 4})); });
  EXPECT_NE(msg.find("in replica 1 on device cpu:1 (replica 1 of 2 got rows 3..5 of a batch of 6 split along dim 0)."), std::string::npos) << msg;
  msg = message_of<ShapeError>([&] { data_parallel(model, randn({8, 4}), cpu_devices(2)); });
  EXPECT_NE(msg.find("in replica 1 on device cpu:1 (replica 1 of 2 got rows 4..7 of a batch of 8 split along dim 0)."), std::string::npos) << msg;
  // parallel_apply alone knows nothing of a batch: the context is the replica and device only.
  SplitOptions split;
  split.devices = cpu_devices(2);
  msg = message_of<ShapeError>([&] {
    parallel_apply(replicate(model, split.devices), scatter_args(std::make_tuple(randn({4, 4})), split), split.devices);
  });
  EXPECT_NE(msg.find("Caught dp::ShapeError in replica 1 on device cpu:1.\nOriginal message: unexpected slice of size [2, 4]"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace dp::parallel
