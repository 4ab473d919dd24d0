// Graphs 100,000 nodes deep: backward, grad() and simply dropping the graph must not recurse per
// node (a recursive traversal or a recursive chain of shared_ptr<Node> destructors overflows the
// 8 MiB stack long before that depth). Runs on the calling thread and on a device worker.
#include <gtest/gtest.h>
#include <future>
#include "autograd/engine_test_ops.h"

namespace dp::agtest {
namespace {

constexpr int kDepth = 100000;

// x -> x*1 -> ... (kDepth nodes); the chain only through the graph's edges.
Tensor scale_chain(const Tensor& x, int depth) {
  Tensor h = x;
  for (int i = 0; i < depth; ++i) h = tscale(h, 1.0f);
  return h;
}

// The same with a node that saves its input: each node's saved tensor holds the previous node too.
Tensor mul_chain(const Tensor& x, const Tensor& one, int depth) {
  Tensor h = x;
  for (int i = 0; i < depth; ++i) h = tmul(h, one);
  return h;
}

TEST(DeepGraph, BackwardThroughLongChain) {
  Tensor x = leaf({2, 3});
  Tensor y = tsum(scale_chain(x, kDepth));
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{1, 1}));
}

TEST(DeepGraph, BackwardThroughLongChainWithSavedTensors) {
  Tensor x = leaf({2, 3});
  Tensor one = leaf({1, 1});
  Tensor y = tsum(mul_chain(x, one, kDepth));
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{1, 1}));
  // d/d(one) of x * one^kDepth = kDepth * x
  EXPECT_EQ(values(one.grad()), (std::vector<float>{2.0f * kDepth, 3.0f * kDepth}));
}

TEST(DeepGraph, GradThroughLongChainKeepsGraph) {
  Tensor x = leaf({5});
  Tensor y = tsum(scale_chain(x, kDepth));
  EXPECT_FLOAT_EQ(value(autograd::grad({y}, {x}, {}, /*retain_graph=*/true)[0]), 1);
  EXPECT_FLOAT_EQ(value(autograd::grad({y}, {x})[0]), 1);
}

// Only the graph is built, then dropped: destruction is iterative.
TEST(DeepGraph, DroppingLongChainWithoutBackward) {
  Tensor x = leaf({1});
  {
    Tensor y = scale_chain(x, kDepth);
    EXPECT_EQ(y.grad_fn()->name(), "ScaleBackward");
  }
  {
    Tensor one = leaf({1});
    Tensor y = mul_chain(x, one, kDepth);  // saved tensors own history as well
  }
  // The chain is still usable where a tensor keeps it alive.
  Tensor y = scale_chain(x, 1000);
  tsum(y).backward();
  EXPECT_FLOAT_EQ(value(x.grad()), 1);
}

// Dropped after a retain_graph backward (the saved state is still there).
TEST(DeepGraph, DroppingAfterRetainedBackward) {
  Tensor x = leaf({1});
  Tensor one = vec({1});
  {
    Tensor y = tsum(mul_chain(x, one, kDepth));
    y.backward(Tensor(), true);
  }
  EXPECT_FLOAT_EQ(value(x.grad()), 1);
}

// A deep chain on a device: every node runs on cpu:0's worker, and the graph is dropped there.
TEST(DeepGraph, LongChainOnWorker) {
  ensure_cpu_devices(2);
  Tensor x = leaf({1}, Device::cpu(0));
  Tensor y = tsum(scale_chain(x, kDepth));
  y.backward();
  EXPECT_FLOAT_EQ(value(x.grad()), 1);
  auto f = worker_for(Device::cpu(0))->submit([x] {
    Tensor one = vec({1}, Device::cpu(0));
    Tensor z = tsum(mul_chain(x, one, kDepth));
    z.backward();
    return value(x.grad());  // the graph is dropped here, on the worker's thread
  });
  EXPECT_FLOAT_EQ(f.get(), 2);
}

// Several roots spread along one deep chain: each root's gradient flows down the rest of it.
TEST(DeepGraph, WideAndDeep) {
  Tensor x = leaf({1});
  std::vector<Tensor> roots;
  Tensor h = x;
  for (int i = 0; i < kDepth; ++i) {
    h = tscale(h, 1.0f);
    if (i % 10000 == 0) roots.push_back(tsum(h));
  }
  autograd::backward(roots);
  EXPECT_FLOAT_EQ(value(x.grad()), static_cast<float>(roots.size()));
}

}  // namespace
}  // namespace dp::agtest
