// Worker: the thread of one device. Tasks run in order, submit() returns results and exceptions,
// destruction drains the queue (including tasks queued while draining), run_until() lets a task
// wait for work queued on its own worker, notify() wakes it without a lost wakeup, and a task that
// throws does not kill the thread.
#include <gtest/gtest.h>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "dp/core/worker.h"

namespace dp {
namespace {

using namespace std::chrono_literals;

TEST(Worker, RunsTasksInSubmissionOrder) {
  Worker w(Device::cpu(0));
  std::vector<int> order;  // only the worker's thread writes it
  for (int i = 0; i < 1000; ++i) w.post([&order, i] { order.push_back(i); });
  w.submit([] {}).get();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[i], i);
}

TEST(Worker, SubmitReturnsResultsAndExceptions) {
  Worker w(Device::cpu(1));
  EXPECT_EQ(w.submit([] { return 6 * 7; }).get(), 42);
  EXPECT_EQ(w.submit([] { return std::string("on worker"); }).get(), "on worker");
  auto f = w.submit([]() -> int { throw ValueError("bad value on cpu:1"); });
  try {
    f.get();
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "bad value on cpu:1");
  }
  EXPECT_EQ(w.submit([] { return 1; }).get(), 1);  // still alive
  EXPECT_EQ(w.device(), Device::cpu(1));
}

TEST(Worker, CurrentAndIsCurrent) {
  Worker w(Device::cpu(0));
  EXPECT_EQ(Worker::current(), nullptr);
  EXPECT_FALSE(w.is_current());
  auto f = w.submit([&w] { return Worker::current() == &w && w.is_current(); });
  EXPECT_TRUE(f.get());
  EXPECT_NE(w.submit([] { return std::this_thread::get_id(); }).get(), std::this_thread::get_id());
}

// Destruction runs everything queued (and what those tasks queue) before joining.
TEST(Worker, DestructionDrainsTheQueue) {
  std::atomic<int> ran{0};
  {
    Worker w(Device::cpu(0));
    for (int i = 0; i < 50; ++i)
      w.post([&ran] {
        std::this_thread::sleep_for(200us);
        ++ran;
      });
    w.post([&w, &ran] {
      w.post([&ran] { ran += 100; });  // queued while the queue drains
    });
  }
  EXPECT_EQ(ran.load(), 150);
}

// A task waits, via run_until, for tasks it queued on its own worker: no deadlock.
TEST(Worker, RunUntilRunsOwnQueue) {
  Worker w(Device::cpu(0));
  auto f = w.submit([&w] {
    int done = 0;
    for (int i = 0; i < 10; ++i) w.post([&done] { ++done; });
    w.run_until([&] { return done == 10; });
    return done;
  });
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "run_until deadlocked";
  EXPECT_EQ(f.get(), 10);
}

// run_until's condition set by another thread, followed by notify(): it must return, every time
// (regression test for a lost wakeup between the condition check and the wait).
TEST(Worker, NotifyWakesRunUntil) {
  Worker w(Device::cpu(0));
  for (int round = 0; round < 2000; ++round) {
    std::atomic<bool> flag{false};
    std::promise<void> waiting;
    auto f = w.submit([&] {
      waiting.set_value();
      w.run_until([&] { return flag.load(); });
      return true;
    });
    waiting.get_future().wait();
    flag = true;
    w.notify();
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "lost wakeup in round " << round;
    EXPECT_TRUE(f.get());
  }
}

TEST(Worker, RunUntilFromAnotherThreadIsAnError) {
  Worker w(Device::cpu(0));
  EXPECT_THROW(w.run_until([] { return true; }), DeviceError);
}

// A post()ed task that throws does not end the worker; the first such exception is kept.
TEST(Worker, ThrowingPostedTaskIsKept) {
  Worker w(Device::cpu(0));
  EXPECT_EQ(w.unhandled_error(), nullptr);
  w.post([] { throw IndexError("first"); });
  w.post([] { throw IndexError("second"); });
  EXPECT_EQ(w.submit([] { return 5; }).get(), 5);
  std::exception_ptr e = w.unhandled_error();
  ASSERT_NE(e, nullptr);
  try {
    std::rethrow_exception(e);
  } catch (const IndexError& err) {
    EXPECT_STREQ(err.what(), "first");
  }
}

// Tasks from many threads at once all run exactly once.
TEST(Worker, ManyProducers) {
  Worker w(Device::cpu(0));
  std::atomic<int> sum{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < 4; ++t)
    producers.emplace_back([&] {
      for (int i = 1; i <= 1000; ++i) w.post([&sum, i] { sum += i; });
    });
  for (auto& p : producers) p.join();
  w.submit([] {}).get();
  EXPECT_EQ(sum.load(), 4 * 500500);
}

// The registry's workers: one per CPU device, started on first use, none for the host.
TEST(WorkerRegistry, OneWorkerPerDevice) {
  if (cpu_device_count() < 2) set_cpu_device_count(2);
  Worker* w0 = worker_for(Device::cpu(0));
  Worker* w1 = worker_for(Device::cpu(1));
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  EXPECT_NE(w0, w1);
  EXPECT_EQ(worker_for(Device::cpu(0)), w0);
  EXPECT_EQ(w1->device(), Device::cpu(1));
  EXPECT_EQ(worker_for(Device::cpu()), nullptr);
  // Registry workers run the same way.
  EXPECT_EQ(w1->submit([&] { return Worker::current(); }).get(), w1);
}

}  // namespace
}  // namespace dp
