// replicate() and parallel_apply(): replicas' tensors, gradients into the originals, threads,
// grad mode, errors.
#include <gtest/gtest.h>
#include <set>
#include <stdexcept>
#include <thread>
#include "dp/dp.h"
#include "support/devices.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel_apply.h"
#include "dp/parallel/replicate.h"

namespace dp::parallel {
namespace {

class Replicate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

// Tied weights, a buffer, a frozen parameter, a parameter the forward does not use, and an
// unregistered tensor member (shared by replicas, as Python's shallow attribute copy).
struct Net : nn::Module {
  Tensor w, tied, frozen, unused, steps;
  nn::Linear fc{nullptr};
  Tensor cache;
  Net() {
    w = register_parameter("w", randn({3, 3}));
    tied = w;
    register_parameter("tied_again", w);  // the same tensor in a second slot
    frozen = register_parameter("frozen", randn({3}), /*requires_grad=*/false);
    unused = register_parameter("unused", randn({2}));
    steps = register_buffer("steps", zeros({1}));
    fc = register_module("fc", nn::Linear(3, 2));
    cache = ones({1});
  }
  Tensor forward(const Tensor& x) {
    {
      NoGradGuard no_grad;
      steps.add_(1.0);  // an in-place buffer update, as BatchNorm's running statistics
    }
    return fc(x.mm(w) + frozen);
  }
};

using test::cpu_devices;

TEST_F(Replicate, ReplicasShareOrCopyTensorsAsDocumented) {
  manual_seed(1);
  auto net = std::make_shared<Net>();
  net->to("cpu:0");
  auto reps = replicate(net, cpu_devices(3));
  ASSERT_EQ(reps.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    const Device d = Device::cpu(static_cast<int>(j));
    auto& r = *reps[j];
    EXPECT_NE(reps[j].get(), net.get());
    EXPECT_EQ(r.w.device(), d);
    EXPECT_EQ(r.fc->weight.device(), d);
    EXPECT_TRUE(r.tied.is_same(r.w));              // tied weights stay tied
    EXPECT_EQ(r.w.data_ptr(), net->w.data_ptr());  // host memory: parameters are not copied
    EXPECT_FALSE(r.w.is_leaf());                   // linked to the original for backward
    EXPECT_TRUE(r.w.requires_grad());
    EXPECT_FALSE(r.frozen.requires_grad());                      // a frozen parameter stays frozen
    EXPECT_EQ(r.parameters().size(), net->parameters().size());  // unlike PyTorch, replicas expose parameters
    EXPECT_TRUE(r.cache.is_same(net->cache));                    // unregistered members are shared
  }
  EXPECT_TRUE(reps[0]->steps.is_same(net->steps));  // replica 0's buffers are the originals
  EXPECT_FALSE(reps[1]->steps.is_same(net->steps));
  EXPECT_NE(reps[1]->steps.data_ptr(), net->steps.data_ptr());
}

TEST_F(Replicate, BackwardSumsEveryReplicasGradientIntoTheOriginals) {
  manual_seed(2);
  auto net = std::make_shared<Net>();
  auto reference = nn::clone(net);
  net->to("cpu:0");
  Tensor x = randn({6, 3});
  auto reps = replicate(net, cpu_devices(3));
  Tensor loss = zeros({}).to("cpu:0");
  for (int j = 0; j < 3; ++j) {
    Tensor out = reps[static_cast<size_t>(j)]->forward(x.narrow(0, 2 * j, 2).to(Device::cpu(j)));
    loss = loss + out.pow(2).sum().to("cpu:0");
  }
  loss.backward();
  reference->forward(x).pow(2).sum().backward();
  EXPECT_TRUE(allclose(net->w.grad().cpu(), reference->w.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(net->fc->weight.grad().cpu(), reference->fc->weight.grad(), 1e-5, 1e-6));
  ASSERT_TRUE(net->unused.grad().defined());  // unused parameters get zeros, not None
  EXPECT_TRUE(equal(net->unused.grad().cpu(), zeros({2})));
  EXPECT_FALSE(net->frozen.grad().defined());
  // Replica 0 updated the original buffer in place; the others updated their own copies.
  EXPECT_EQ(net->steps.cpu().item<float>(), 1.0f);
}

TEST_F(Replicate, DoubleBackwardThroughReplicas) {
  // d/dw of (d loss/dw)^2 through two replicas equals the single-module value.
  auto make = [] {
    manual_seed(3);
    auto lin = nn::Linear(nn::LinearOptions(2, 1).bias(false));
    lin->to(kFloat64);
    return lin.ptr();
  };
  auto net = make();
  auto ref = make();
  Tensor x = randn({4, 2}).to(kFloat64);
  net->to("cpu:0");
  auto reps = replicate(net, cpu_devices(2));
  Tensor loss =
      (reps[0]->forward(x.narrow(0, 0, 2).to("cpu:0")).pow(3).sum() + reps[1]->forward(x.narrow(0, 2, 2).to("cpu:1")).pow(3).sum().to("cpu:0"));
  Tensor g = autograd::grad({loss}, {net->weight}, {}, false, /*create_graph=*/true)[0];
  g.pow(2).sum().backward();
  Tensor loss_ref = ref->forward(x).pow(3).sum();
  Tensor g_ref = autograd::grad({loss_ref}, {ref->weight}, {}, false, true)[0];
  g_ref.pow(2).sum().backward();
  EXPECT_TRUE(allclose(g.cpu(), g_ref, 1e-10, 1e-12));
  EXPECT_TRUE(allclose(net->weight.grad().cpu(), ref->weight.grad(), 1e-10, 1e-12));
}

TEST_F(Replicate, DetachOrNoGradGivesReplicasWithoutHistory) {
  auto net = std::make_shared<Net>();
  net->to("cpu:0");
  for (auto& r : replicate(net, cpu_devices(2), /*detach=*/true)) EXPECT_FALSE(r->w.requires_grad());
  NoGradGuard no_grad;
  for (auto& r : replicate(net, cpu_devices(2))) EXPECT_FALSE(r->w.requires_grad());
}

TEST_F(Replicate, TheModuleMustBeOnTheFirstDevice) {
  auto net = std::make_shared<Net>();  // on the host "cpu"
  try {
    replicate(net, cpu_devices(2));
    FAIL();
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("module must have its parameters and buffers on device cpu:0 (devices[0]) but found one of them on device: cpu"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  }
}

TEST_F(Replicate, AReplicaSetKeepsReplicasAndRebuildsOnlyOnStructureChanges) {
  auto net = std::make_shared<Net>();
  net->template remember_type<Net>();
  net->to("cpu:0");
  detail::ReplicaSet set(net);
  for (int step = 0; step < 5; ++step) set.prepare(cpu_devices(2), false);
  EXPECT_EQ(set.builds(), 2);  // one per device, once
  // Moving the original (new storage) re-links the replicas without rebuilding them.
  net->to("cpu:0", kFloat64);
  auto reps = set.prepare(cpu_devices(2), false);
  EXPECT_EQ(set.builds(), 2);
  auto* r1 = static_cast<Net*>(reps[1].get());
  EXPECT_EQ(r1->w.dtype(), kFloat64);
  EXPECT_EQ(r1->w.data_ptr(), net->w.data_ptr());
  // A new submodule is a structure change: rebuilt.
  net->register_module("extra", nn::Linear(2, 2));
  net->to("cpu:0");
  set.prepare(cpu_devices(2), false);
  EXPECT_EQ(set.builds(), 4);
  // The other replicas' buffers are refreshed from the original every step.
  net->steps.fill_(5.0);
  reps = set.prepare(cpu_devices(2), false);
  EXPECT_EQ(static_cast<Net*>(reps[1].get())->steps.cpu().item<float>(), 5.0f);
}

TEST_F(Replicate, ReplicasFollowTheOriginalsTrainingFlags) {
  auto seq = nn::Sequential(nn::Linear(2, 2), nn::Dropout(0.5));
  seq->to("cpu:0");
  detail::ReplicaSet set(seq.ptr());
  set.prepare(cpu_devices(2), false);
  seq->eval();
  (*seq)[1]->train();  // a submodule in a different mode
  auto reps = set.prepare(cpu_devices(2), false);
  auto modules = reps[1]->modules();
  EXPECT_FALSE(modules[0]->is_training());
  EXPECT_FALSE(modules[1]->is_training());
  EXPECT_TRUE(modules[2]->is_training());
}

// ---------------------------------------------------------------- parallel_apply

struct Probe : nn::Module {
  std::atomic<int>* calls;
  explicit Probe(std::atomic<int>* c) : calls(c) {}
  Probe(const Probe&) = default;
  // Where it ran and in which grad mode, and a failure on request.
  std::tuple<Device, bool, std::thread::id> forward(const Tensor& x, int fail_with) {
    ++*calls;
    if (fail_with == 1 && x.device() == Device("cpu:1")) throw IndexError("index 9 out of range");
    if (fail_with == 2) throw std::out_of_range("std out of range on " + x.device().str());
    if (fail_with == 3) throw 42;
    Worker* w = Worker::current();
    return {w ? w->device() : Device::cpu(), GradMode::is_enabled(), std::this_thread::get_id()};
  }
};

TEST_F(Replicate, ParallelApplyRunsEachReplicaOnItsDevicesWorkerWithTheCallersGradMode) {
  std::atomic<int> calls{0};
  std::vector<std::shared_ptr<Probe>> mods;
  std::vector<std::tuple<Tensor, int>> inputs;
  for (int j = 0; j < 4; ++j) {
    mods.push_back(std::make_shared<Probe>(&calls));
    inputs.emplace_back(zeros({1}).to(Device::cpu(j)), 0);
  }
  auto out = parallel_apply(mods, inputs, cpu_devices(4));
  std::set<std::thread::id> threads;
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(std::get<0>(out[static_cast<size_t>(j)]), Device::cpu(j));
    EXPECT_TRUE(std::get<1>(out[static_cast<size_t>(j)]));
    threads.insert(std::get<2>(out[static_cast<size_t>(j)]));
  }
  EXPECT_EQ(threads.size(), 4u);
  NoGradGuard no_grad;
  for (auto& o : parallel_apply(mods, inputs, cpu_devices(4))) EXPECT_FALSE(std::get<1>(o));
}

TEST_F(Replicate, ParallelApplyRethrowsTheFirstFailureByIndexWithItsType) {
  std::atomic<int> calls{0};
  std::vector<std::shared_ptr<Probe>> mods{std::make_shared<Probe>(&calls), std::make_shared<Probe>(&calls)};
  std::vector<std::tuple<Tensor, int>> inputs{{zeros({1}).to("cpu:0"), 1}, {zeros({1}).to("cpu:1"), 1}};
  try {
    parallel_apply(mods, inputs, cpu_devices(2));
    FAIL();
  } catch (const IndexError& e) {  // the type survives
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Caught dp::IndexError in replica 1 on device cpu:1."), std::string::npos) << msg;
    EXPECT_NE(msg.find("index 9 out of range"), std::string::npos) << msg;
  }
  EXPECT_EQ(calls.load(), 2);  // every replica ran to the end
  inputs = {{zeros({1}).to("cpu:0"), 2}, {zeros({1}).to("cpu:1"), 2}};
  try {
    parallel_apply(mods, inputs, cpu_devices(2));
    FAIL();
  } catch (const std::out_of_range& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("in replica 0 on device cpu:0 (1 other replica(s) failed too"), std::string::npos) << msg;
    EXPECT_NE(msg.find("std out of range on cpu:0"), std::string::npos) << msg;
  }
  inputs = {{zeros({1}).to("cpu:0"), 0}, {zeros({1}).to("cpu:1"), 3}};
  try {
    parallel_apply(mods, inputs, cpu_devices(2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown type in replica 1 on device cpu:1"), std::string::npos) << e.what();
  }
  // And the next call works.
  inputs = {{zeros({1}).to("cpu:0"), 0}, {zeros({1}).to("cpu:1"), 0}};
  EXPECT_EQ(parallel_apply(mods, inputs, cpu_devices(2)).size(), 2u);
}

TEST_F(Replicate, ParallelApplyChecksItsArguments) {
  std::atomic<int> calls{0};
  std::vector<std::shared_ptr<Probe>> mods{std::make_shared<Probe>(&calls)};
  std::vector<std::tuple<Tensor, int>> two_inputs{{zeros({1}), 0}, {zeros({1}), 0}};
  EXPECT_THROW(parallel_apply(mods, two_inputs, cpu_devices(1)), ValueError);
  std::vector<std::tuple<Tensor, int>> one_input{{zeros({1}), 0}};
  EXPECT_THROW(parallel_apply(mods, one_input, cpu_devices(2)), ValueError);
}

}  // namespace
}  // namespace dp::parallel
