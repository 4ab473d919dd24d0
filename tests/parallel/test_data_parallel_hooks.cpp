// Module hooks under DataParallel, as in PyTorch: replicas share the original's hooks, so a hook on
// the module (or one of its children) fires once per device and forward, in the replica's thread,
// with the replica and its slice; hooks on the DataParallel wrapper fire once, with the whole batch
// and the gathered output. Two CPU devices (cpu:0, cpu:1: worker threads).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>
#include "dp/core/device_registry.h"
#include "dp/core/worker.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"
#include "support/devices.h"

namespace dp::parallel {
namespace {

using nn::Module;
using nn::TensorList;
using test::cpu_devices;
using ::testing::HasSubstr;

class DataParallelHooks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(2); }
};

struct Net : nn::Module {
  nn::Linear fc{nullptr};
  Net() { fc = register_module("fc", nn::Linear(5, 2)); }
  Tensor forward(const Tensor& x) { return fc(x); }
};

std::shared_ptr<Net> make_net() {
  manual_seed(5);
  auto net = std::make_shared<Net>();
  net->to("cpu:0");
  return net;
}

// What hooks saw, from any thread: hooks under DataParallel must keep thread-safe state.
struct Log {
  std::mutex mu;
  std::multiset<std::string> entries;
  std::vector<std::pair<Tensor, Tensor>> grads;  // (grad_input[0], grad_output[0]) per backward hook call
  void add(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    entries.insert(s);
  }
  std::multiset<std::string> take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(entries, {});
  }
};

// "shape@device", plus "!thread" when the calling thread is not the tensor's device worker and
// "!module" when `m` is not a replica distinct from `original`.
std::string where(const Tensor& t, const Module& m, const Module* original) {
  std::string s = t.size_str() + "@" + t.device().str();
  if (Worker::current() != worker_for(t.device())) s += " !thread";
  if (!m.is_replica() || &m == original) s += " !module";
  return s;
}

TEST_F(DataParallelHooks, ModuleHooksFireInEveryReplicaWithItsSlice) {
  auto model = make_net();
  Log log;
  model->register_forward_pre_hook([&](Module& m, const TensorList& in) { log.add("pre " + where(in[0], m, model.get())); });
  model->register_forward_hook([&](Module& m, const TensorList& in, const Tensor& out) { log.add("fwd " + where(out, m, model.get())); });
  model->register_full_backward_hook([&](Module& m, const TensorList& gi, const TensorList& go) {
    log.add("bwd in " + where(gi[0], m, model.get()) + " out " + go[0].size_str());
    std::lock_guard<std::mutex> lock(log.mu);
    log.grads.emplace_back(gi[0], go[0]);
  });
  nn::DataParallel<Net> net(model, cpu_devices(2));
  Tensor x = randn({6, 5}, TensorOptions().device("cpu:0")).requires_grad_(true);
  Tensor y = net(x);
  EXPECT_EQ(log.take(), (std::multiset<std::string>{"pre [3, 5]@cpu:0", "pre [3, 5]@cpu:1", "fwd [3, 2]@cpu:0", "fwd [3, 2]@cpu:1"}));
  Tensor weights = randn({6, 2}, TensorOptions().device("cpu:0"));
  (y * weights).sum().backward();
  EXPECT_EQ(log.take(), (std::multiset<std::string>{"bwd in [3, 5]@cpu:0 out [3, 2]", "bwd in [3, 5]@cpu:1 out [3, 2]"}));
  // Each replica's grad_output is its rows of dloss/dy, and its grad_input its rows of x.grad.
  ASSERT_EQ(log.grads.size(), 2u);
  if (log.grads[0].first.device() != Device("cpu:0")) std::swap(log.grads[0], log.grads[1]);
  Tensor grad_input = cat({log.grads[0].first, log.grads[1].first.to("cpu:0")});
  Tensor grad_output = cat({log.grads[0].second, log.grads[1].second.to("cpu:0")});
  EXPECT_TRUE(allclose(grad_output, weights));
  EXPECT_TRUE(allclose(grad_input, x.grad(), 1e-5, 1e-6));
}

TEST_F(DataParallelHooks, HooksOfChildrenFireInTheReplicasChildren) {
  auto model = make_net();
  Log log;
  model->fc->register_forward_hook(
      [&](Module& m, const TensorList&, const Tensor& out) { log.add(m.name() + " " + where(out, m, model->fc.get())); });
  nn::DataParallel<Net> net(model, cpu_devices(2));
  net(randn({4, 5}, TensorOptions().device("cpu:0")));
  EXPECT_EQ(log.take(), (std::multiset<std::string>{"Linear [2, 2]@cpu:0", "Linear [2, 2]@cpu:1"}));
}

TEST_F(DataParallelHooks, HooksOnTheWrapperFireOnceWithTheWholeBatch) {
  auto model = make_net();
  nn::DataParallel<Net> net(model, cpu_devices(2));
  Log log;
  std::atomic<int> replica_calls{0};
  model->register_forward_hook([&](Module&, const TensorList&, const Tensor&) { ++replica_calls; });
  net->register_forward_pre_hook([&](Module& m, const TensorList& in) -> std::optional<TensorList> {
    log.add("pre " + in[0].size_str() + (&m == net.get() ? "" : " !module"));
    return TensorList{in[0] * 2.0};
  });
  net->register_forward_hook([&](Module& m, const TensorList& in, const Tensor& out) {
    log.add("fwd " + out.size_str() + "@" + out.device().str() + (Worker::current() == nullptr ? "" : " !thread"));
    return out + 1.0;
  });
  net->register_full_backward_hook(
      [&](Module&, const TensorList& gi, const TensorList& go) { log.add("bwd " + gi[0].size_str() + " " + go[0].size_str()); });
  Tensor x = randn({6, 5}, TensorOptions().device("cpu:0")).requires_grad_(true);
  Tensor y = net(x);
  EXPECT_EQ(log.take(), (std::multiset<std::string>{"pre [6, 5]", "fwd [6, 2]@cpu:0"}));
  EXPECT_EQ(replica_calls.load(), 2);
  EXPECT_TRUE(allclose(y, model->forward(x * 2.0) + 1.0, 1e-5, 1e-6));
  y.sum().backward();
  EXPECT_EQ(log.take(), (std::multiset<std::string>{"bwd [6, 5] [6, 2]"}));
}

TEST_F(DataParallelHooks, HooksRegisteredOrRemovedAfterTheReplicasWereBuiltApply) {
  auto model = make_net();
  nn::DataParallel<Net> net(model, cpu_devices(2));
  Tensor x = randn({4, 5}, TensorOptions().device("cpu:0"));
  net(x);
  ASSERT_EQ(net->replica_builds(), 2);  // one per device, kept for the next forwards
  std::atomic<int> calls{0};
  nn::RemovableHandle h = model->register_forward_hook([&](Module&, const TensorList&, const Tensor&) { ++calls; });
  net(x);
  EXPECT_EQ(calls.load(), 2);
  h.remove();
  net(x);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(net->replica_builds(), 2);
}

TEST_F(DataParallelHooks, ForwardLossAndTheFunctionalFormRunTheHooksToo) {
  auto model = make_net();
  Log log;
  model->register_forward_hook([&](Module& m, const TensorList&, const Tensor& out) { log.add(where(out, m, model.get())); });
  Tensor x = randn({4, 5}, TensorOptions().device("cpu:0"));
  const std::multiset<std::string> per_replica{"[2, 2]@cpu:0", "[2, 2]@cpu:1"};
  nn::DataParallel<Net> net(model, cpu_devices(2));
  net->forward_loss(nn::MSELoss(), randn({4, 2}, TensorOptions().device("cpu:0")), x);
  EXPECT_EQ(log.take(), per_replica);
  data_parallel(model, x, cpu_devices(2));
  EXPECT_EQ(log.take(), per_replica);
}

TEST_F(DataParallelHooks, AFailingHookInAReplicaNamesReplicaHookAndModule) {
  auto model = make_net();
  nn::DataParallel<Net> net(model, cpu_devices(2));
  nn::RemovableHandle h = model->register_forward_hook(
      [](Module&, const TensorList&, const Tensor& out) {
        if (out.device() == Device("cpu:1")) throw std::runtime_error("no cpu:1 today");
      },
      "picky");
  Tensor x = randn({4, 5}, TensorOptions().device("cpu:0"));
  try {
    net(x);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("in replica 1 on device cpu:1"));
    EXPECT_THAT(e.what(), HasSubstr("in forward hook #0 ('picky') of Net"));
    EXPECT_THAT(e.what(), HasSubstr("no cpu:1 today"));
  }
  h.remove();
  EXPECT_EQ(net(x).size(0), 4);  // the workers are free again
}

TEST_F(DataParallelHooks, AFailingBackwardHookInAReplicaLeavesBackward) {
  auto model = make_net();
  nn::DataParallel<Net> net(model, cpu_devices(2));
  model->register_full_backward_hook(
      [](Module&, const TensorList& gi, const TensorList&) {
        if (gi[0].device() == Device("cpu:1")) throw ValueError("gradient rejected");
      },
      "gate");
  Tensor x = randn({4, 5}, TensorOptions().device("cpu:0")).requires_grad_(true);
  Tensor loss = net(x).sum();
  try {
    loss.backward();
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("full backward hook #0 ('gate') of Net"));
    EXPECT_THAT(e.what(), HasSubstr("gradient rejected"));
  }
}

}  // namespace
}  // namespace dp::parallel
