// The engine across threads: nodes run on their device's worker, two devices' parts of one backward
// run at the same time, re-entrant backward from a worker does not deadlock, errors from a worker
// reach the caller, and backward calls from several user threads (disjoint and shared graphs) give
// exact gradients. Every wait that a wrong schedule would turn into a hang has a timeout that fails
// the test instead.
#include <gtest/gtest.h>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include "autograd/engine_test_ops.h"

namespace dp::agtest {
namespace {

using namespace std::chrono_literals;
constexpr auto kTimeout = 20s;

class EngineThreads : public ::testing::Test {
 protected:
  void SetUp() override { ensure_cpu_devices(4); }
};

std::thread::id worker_thread_id(Device d) {
  return worker_for(d)->submit([] { return std::this_thread::get_id(); }).get();
}

// Waits for a future with a timeout; a hang becomes a failure (and the process exits, since a
// deadlocked worker could not be joined).
template <typename T>
T get_or_die(std::future<T>& f, const char* what) {
  if (f.wait_for(kTimeout) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not finish within the timeout: deadlock";
    std::fflush(nullptr);
    std::_Exit(1);
  }
  return f.get();
}

// Each node runs on its device's worker; host nodes in the calling thread.
TEST_F(EngineThreads, NodesRunOnTheirDevicesWorker) {
  Device d0 = Device::cpu(0), d1 = Device::cpu(1);
  std::thread::id on0, on1, on_host;
  Tensor x = leaf({1, 2});  // host
  Tensor a = tprobe(tto(x, d0), [&] { on0 = std::this_thread::get_id(); });
  Tensor b = tprobe(tto(x, d1), [&] { on1 = std::this_thread::get_id(); });
  Tensor y = tsum(tadd(tto(tscale(a, 2), Device::cpu()), tprobe(tto(tscale(b, 3), Device::cpu()), [&] { on_host = std::this_thread::get_id(); })));
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{5, 5}));
  EXPECT_EQ(on0, worker_thread_id(d0));
  EXPECT_EQ(on1, worker_thread_id(d1));
  EXPECT_EQ(on_host, std::this_thread::get_id());
}

// Two devices' parts of one backward run at the same time: a node on cpu:0 and a node on cpu:1
// meet at a rendezvous inside their backward. Run one after the other, the first would wait
// alone until the timeout and throw, failing the backward.
TEST_F(EngineThreads, TwoDevicesRunInParallel) {
  for (int round = 0; round < 5; ++round) {
    Rendezvous meet(2);
    std::atomic<int> met{0};
    auto wait_for_other = [&] {
      if (!meet.arrive_and_wait(std::chrono::duration_cast<std::chrono::milliseconds>(kTimeout)))
        throw std::runtime_error("the other device's node never arrived: devices ran serially");
      ++met;
    };
    Tensor x0 = leaf({1, 2}, Device::cpu(0));
    Tensor x1 = leaf({3, 4}, Device::cpu(1));
    Tensor b0 = tprobe(tscale(x0, 2), wait_for_other);
    Tensor b1 = tprobe(tscale(x1, 3), wait_for_other);
    Tensor y = tsum(tadd(tto(b0, Device::cpu()), tto(b1, Device::cpu())));
    y.backward();
    EXPECT_EQ(met.load(), 2);
    EXPECT_EQ(values(x0.grad()), (std::vector<float>{2, 2}));
    EXPECT_EQ(values(x1.grad()), (std::vector<float>{3, 3}));
    EXPECT_EQ(x0.grad().device(), Device::cpu(0));
  }
}

// Replicas on four devices: the host parameter is broadcast, each replica's graph runs on its own
// worker (all four meet at a rendezvous), and the parameter's gradient is the sum.
TEST_F(EngineThreads, FourReplicasLikeDataParallel) {
  Tensor w = leaf({1, 2, 3});
  Rendezvous meet(4);
  std::vector<Tensor> parts;
  for (int d = 0; d < 4; ++d) {
    Tensor wd = tto(w, Device::cpu(d));
    Tensor xd = vec({float(d), float(d + 1), float(d + 2)}, Device::cpu(d));
    Tensor yd = tprobe(tmul(wd, xd), [&] {
      if (!meet.arrive_and_wait(std::chrono::duration_cast<std::chrono::milliseconds>(kTimeout)))
        throw std::runtime_error("replicas did not run in parallel");
    });
    parts.push_back(tto(tsum(yd), Device::cpu()));
  }
  Tensor loss = tadd(tadd(parts[0], parts[1]), tadd(parts[2], parts[3]));
  int ready_calls = 0;
  w.register_post_accumulate_grad_hook([&](Tensor&) { ++ready_calls; });
  loss.backward();
  // d/dw sum_d w·x_d = sum_d x_d = (0+1+2+3, 1+2+3+4, 2+3+4+5)
  EXPECT_EQ(values(w.grad()), (std::vector<float>{6, 10, 14}));
  EXPECT_EQ(ready_calls, 1);
}

// An exception in a node on a worker is re-thrown in the caller (type and message kept) once the
// task has drained; the other branch's work finishes, nothing hangs, and the engine works again.
TEST_F(EngineThreads, ExceptionOnWorkerReachesCaller) {
  Tensor x0 = leaf({1}, Device::cpu(0));
  Tensor x1 = leaf({1}, Device::cpu(1));
  Tensor bad = tprobe(tscale(x1, 2), [] { throw IndexError("index 9 is out of bounds on cpu:1"); });
  Tensor y = tsum(tadd(tto(tscale(x0, 2), Device::cpu()), tto(bad, Device::cpu())));
  auto f = std::async(std::launch::async, [&] {
    try {
      y.backward();
      return std::string("no exception");
    } catch (const IndexError& e) {
      return std::string(e.what());
    }
  });
  EXPECT_EQ(get_or_die(f, "backward with a throwing node"), "index 9 is out of bounds on cpu:1");
  EXPECT_FALSE(x1.grad().defined());
  tsum(tto(tscale(x1, 2), Device::cpu())).backward();
  EXPECT_FLOAT_EQ(value(x1.grad()), 2);
}

// Both devices throw: one of the exceptions is reported, and the call returns.
TEST_F(EngineThreads, ExceptionsOnTwoWorkers) {
  Tensor x0 = leaf({1}, Device::cpu(0));
  Tensor x1 = leaf({1}, Device::cpu(1));
  Tensor a = tprobe(x0, [] { throw ValueError("cpu:0 failed"); });
  Tensor b = tprobe(x1, [] { throw ValueError("cpu:1 failed"); });
  Tensor y = tsum(tadd(tto(a, Device::cpu()), tto(b, Device::cpu())));
  try {
    y.backward();
    FAIL();
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_TRUE(m == "cpu:0 failed" || m == "cpu:1 failed") << m;
  }
}

// Re-entrant backward: a node running on cpu:0's worker calls grad() on another graph with nodes on
// cpu:0 (the waiting worker itself must run them) and on cpu:1.
TEST_F(EngineThreads, ReentrantGradInsideWorkerNode) {
  Tensor inner_x = leaf({2}, Device::cpu(0));
  std::vector<float> inner_grad;
  Tensor x = leaf({1}, Device::cpu(0));
  Tensor outer = tprobe(tscale(x, 3), [&] {
    EXPECT_EQ(Worker::current(), worker_for(Device::cpu(0)));
    AutoGradMode enable(true);                                          // nodes run with grad mode off; the inner forward must record
    Tensor a = tscale(inner_x, 5);                                      // node on cpu:0
    Tensor b = tto(tscale(tto(a, Device::cpu(1)), 7), Device::cpu(0));  // nodes on cpu:1, cpu:0
    inner_grad = values(autograd::grad({tsum(b)}, {inner_x})[0]);
  });
  Tensor y = tsum(tto(outer, Device::cpu()));
  auto f = std::async(std::launch::async, [&] { y.backward(); });
  get_or_die(f, "re-entrant backward");
  EXPECT_EQ(inner_grad, (std::vector<float>{35}));
  EXPECT_FLOAT_EQ(value(x.grad()), 3);
}

// Re-entrant backward from a task submitted to a worker: backward() called on cpu:1's thread over a
// graph with nodes on the host, cpu:0 and cpu:1 (the caller's own device runs in place).
TEST_F(EngineThreads, BackwardFromSubmittedTask) {
  Tensor x = leaf({1, 2});
  Tensor y = tsum(tto(tscale(tto(tscale(tto(x, Device::cpu(0)), 2), Device::cpu(1)), 3), Device::cpu()));
  auto f = worker_for(Device::cpu(1))->submit([&] { y.backward(); });
  get_or_die(f, "backward submitted to cpu:1");
  EXPECT_EQ(values(x.grad()), (std::vector<float>{6, 6}));

  // Deeper: backward from cpu:0's worker, whose graph's cpu:1 node itself calls backward on a
  // graph with a cpu:0 node (which needs the first worker, busy waiting).
  Tensor p = leaf({1}, Device::cpu(0));
  Tensor q = leaf({1}, Device::cpu(0));
  Tensor z = tsum(tto(tprobe(tto(tscale(q, 2), Device::cpu(1)),
                             [&] {
                               AutoGradMode enable(true);
                               tsum(tscale(p, 4)).backward();
                             }),
                      Device::cpu(0)));
  auto g = worker_for(Device::cpu(0))->submit([&] { z.backward(); });
  get_or_die(g, "nested backward between two workers");
  EXPECT_FLOAT_EQ(value(p.grad()), 4);
  EXPECT_FLOAT_EQ(value(q.grad()), 2);
}

// Nodes on a worker run with grad mode = create_graph; the worker's own mode is untouched after.
TEST_F(EngineThreads, GradModeOnWorkers) {
  Tensor x = leaf({1}, Device::cpu(2));
  std::vector<int> seen;
  Tensor y = tsum(tprobe(tscale(x, 2), [&] { seen.push_back(GradMode::is_enabled()); }));
  y.backward(Tensor(), true);
  y.backward(Tensor(), true, /*create_graph=*/true);
  EXPECT_EQ(seen, (std::vector<int>{0, 1}));
  EXPECT_TRUE(worker_for(Device::cpu(2))->submit([] { return GradMode::is_enabled(); }).get());
}

// Four user threads, each with its own graph (spanning the host and a device), run backward
// repeatedly at the same time: every gradient is exact.
TEST_F(EngineThreads, ConcurrentBackwardOnDisjointGraphs) {
  constexpr int kThreads = 4, kIters = 100;
  std::vector<std::future<bool>> done;
  for (int t = 0; t < kThreads; ++t) {
    done.push_back(std::async(std::launch::async, [t] {
      bool ok = true;
      for (int i = 0; i < kIters; ++i) {
        Tensor x = leaf({float(t), 1});
        Tensor h = tto(tmul(tto(x, Device::cpu(t)), vec({2, 3}, Device::cpu(t))), Device::cpu());
        tsum(tadd(h, tscale(x, float(i)))).backward();
        auto g = values(x.grad());
        ok = ok && g == std::vector<float>{2.0f + i, 3.0f + i};
      }
      return ok;
    }));
  }
  for (auto& f : done) EXPECT_TRUE(get_or_die(f, "concurrent backward"));
}

// Four user threads run backward(retain_graph) over one shared graph: the shared leaf's
// accumulation is locked, so it ends at exactly threads × iterations × gradient.
TEST_F(EngineThreads, ConcurrentBackwardOnSharedGraph) {
  constexpr int kThreads = 4, kIters = 50;
  Tensor w = leaf({1, 2});
  Tensor h0 = tto(tscale(tto(w, Device::cpu(0)), 2), Device::cpu());
  Tensor h1 = tto(tmul(tto(w, Device::cpu(1)), vec({1, 1}, Device::cpu(1))), Device::cpu());
  Tensor y = tsum(tadd(h0, h1));  // dy/dw = 3
  std::atomic<int> ready{0};
  w.register_post_accumulate_grad_hook([&](Tensor&) { ++ready; });
  std::vector<std::future<void>> done;
  for (int t = 0; t < kThreads; ++t)
    done.push_back(std::async(std::launch::async, [&] {
      for (int i = 0; i < kIters; ++i) y.backward(Tensor(), /*retain_graph=*/true);
    }));
  for (auto& f : done) get_or_die(f, "shared-graph backward");
  EXPECT_EQ(values(w.grad()), (std::vector<float>{3.0f * kThreads * kIters, 3.0f * kThreads * kIters}));
  EXPECT_EQ(ready.load(), kThreads * kIters);
}

// grad() from several threads over a shared graph: each gets its own result, .grad untouched.
TEST_F(EngineThreads, ConcurrentGradOnSharedGraph) {
  Tensor w = leaf({1, 2});
  Tensor y = tsum(tto(tmul(tto(w, Device::cpu(3)), tto(w, Device::cpu(3))), Device::cpu()));
  std::vector<std::future<bool>> done;
  for (int t = 0; t < 4; ++t)
    done.push_back(std::async(std::launch::async, [&] {
      bool ok = true;
      for (int i = 0; i < 50; ++i) ok = ok && values(autograd::grad({y}, {w}, {}, true)[0]) == std::vector<float>{2, 4};
      return ok;
    }));
  for (auto& f : done) EXPECT_TRUE(get_or_die(f, "concurrent grad"));
  EXPECT_FALSE(w.grad().defined());
}

// A leaf on a device accumulates on that device's worker, and the post-accumulate hook (DDP's
// "gradient ready") fires there.
TEST_F(EngineThreads, PostAccumulateHookRunsOnLeafsDevice) {
  Tensor w = leaf({1}, Device::cpu(1));
  std::thread::id where;
  w.register_post_accumulate_grad_hook([&](Tensor&) { where = std::this_thread::get_id(); });
  tsum(tto(tscale(w, 2), Device::cpu())).backward();
  EXPECT_EQ(where, worker_thread_id(Device::cpu(1)));
  EXPECT_FLOAT_EQ(value(w.grad()), 2);
}

}  // namespace
}  // namespace dp::agtest
