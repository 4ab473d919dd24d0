// autograd::queue_callback (PyTorch's Engine::queue_callback): a hook running inside a backward
// pass queues work that runs once, in the caller's thread, after every node has finished — what
// DistributedDataParallel needs to reduce the gradients a pass did not reach.
#include <gtest/gtest.h>
#include <atomic>
#include <stdexcept>
#include <thread>
#include "autograd/engine_test_ops.h"
#include "dp/autograd/callback.h"

namespace dp::agtest {
namespace {

class EngineCallbacks : public ::testing::Test {
 protected:
  void SetUp() override { ensure_cpu_devices(2); }
};

// The callback runs after both leaves have their gradients, once, although both hooks queue it
// only the first time; and not at all in the next pass unless queued again.
TEST_F(EngineCallbacks, RunsOnceAfterEveryLeafAccumulated) {
  Tensor a = leaf({1, 2}), b = leaf({3});
  int queued = 0, ran = 0;
  bool both_ready = false;
  auto hook = [&](Tensor&) {
    EXPECT_TRUE(autograd::in_backward_pass());
    if (queued++ == 0)
      autograd::queue_callback([&] {
        ++ran;
        both_ready = a.grad().defined() && b.grad().defined();
      });
  };
  a.register_post_accumulate_grad_hook(hook);
  b.register_post_accumulate_grad_hook(hook);
  Tensor y = tadd(tsum(tscale(a, 2)), tsum(b));
  y.backward();
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(both_ready);
  EXPECT_EQ(values(a.grad()), (std::vector<float>{2, 2}));
  EXPECT_FALSE(autograd::in_backward_pass());
}

TEST_F(EngineCallbacks, RunInQueueOrderAndMayQueueMore) {
  Tensor a = leaf({1});
  std::vector<int> order;
  a.register_post_accumulate_grad_hook([&](Tensor&) {
    autograd::queue_callback([&] {
      order.push_back(1);
      autograd::queue_callback([&] { order.push_back(3); });
    });
    autograd::queue_callback([&] { order.push_back(2); });
  });
  tsum(a).backward();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST_F(EngineCallbacks, OutsideBackwardIsAnError) {
  try {
    autograd::queue_callback([] {});
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_HAS(e.what(), "outside a backward pass");
  }
}

// Leaves on cpu:0 and cpu:1 accumulate on their devices' workers; the callback queued there runs
// in the thread that called backward(), after both.
TEST_F(EngineCallbacks, QueuedFromWorkersRunInCallerThread) {
  Tensor w0 = leaf({1, 1}, Device::cpu(0)), w1 = leaf({2}, Device::cpu(1));
  std::atomic<int> hooks{0};
  std::thread::id ran_on;
  std::atomic<int> grads_at_callback{0};
  auto hook = [&](Tensor&) {
    if (hooks++ == 0)
      autograd::queue_callback([&] {
        ran_on = std::this_thread::get_id();
        grads_at_callback = (w0.grad().defined() ? 1 : 0) + (w1.grad().defined() ? 1 : 0);
      });
  };
  w0.register_post_accumulate_grad_hook(hook);
  w1.register_post_accumulate_grad_hook(hook);
  Tensor y = tadd(tsum(tto(tscale(w0, 3), Device::cpu())), tsum(tto(w1, Device::cpu())));
  y.backward();
  EXPECT_EQ(hooks.load(), 2);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(grads_at_callback.load(), 2);
  EXPECT_EQ(values(w0.grad()), (std::vector<float>{3, 3}));
}

TEST_F(EngineCallbacks, CallbackErrorPropagatesAndStopsTheRest) {
  Tensor a = leaf({1});
  bool second = false;
  a.register_post_accumulate_grad_hook([&](Tensor&) {
    autograd::queue_callback([] { throw ValueError("callback failed: bucket 3"); });
    autograd::queue_callback([&] { second = true; });
  });
  try {
    tsum(a).backward();
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_HAS(e.what(), "bucket 3");
  }
  EXPECT_FALSE(second);
}

// A pass that fails runs no callback, even one queued before the failure (by the failing hook).
TEST_F(EngineCallbacks, FailedPassRunsNoCallback) {
  Tensor a = leaf({1}), b = leaf({2});
  bool ran = false;
  b.register_hook([&](const Tensor&) -> Tensor {
    autograd::queue_callback([&] { ran = true; });
    throw DTypeError("hook on b failed");
  });
  Tensor y = tadd(tsum(a), tsum(tscale(b, 2)));
  EXPECT_THROW(y.backward(), DTypeError);
  EXPECT_FALSE(ran);
  // The next pass starts clean: nothing left over from the failed one.
  int next = 0;
  a.register_post_accumulate_grad_hook([&](Tensor&) { autograd::queue_callback([&] { ++next; }); });
  tsum(a).backward();
  EXPECT_FALSE(ran);
  EXPECT_EQ(next, 1);
}

}  // namespace
}  // namespace dp::agtest
