#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include "dp/core/device.h"

namespace dp {

// The thread that runs a device's work: replica forwards (parallel_apply) and that device's part of
// every backward pass. Tasks run in submission order. A thread that waits for work it posted to
// its own worker would deadlock, so waiting inside a worker goes through run_until(), which keeps
// executing the queue (the autograd engine uses it for re-entrant backward).
class Worker {
 public:
  explicit Worker(Device device);
  ~Worker();  // drains the queue, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  Device device() const { return device_; }
  void post(std::function<void()> task);
  template <typename F>
  auto submit(F&& f) -> std::future<decltype(f())> {
    using R = decltype(f());
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    std::future<R> fut = task->get_future();
    post([task] { (*task)(); });
    return fut;
  }
  // True when called from this worker's own thread.
  bool is_current() const { return std::this_thread::get_id() == thread_id_; }
  // From the worker's own thread: run queued tasks until done() is true. done() is re-checked
  // after every task and whenever notify() is called.
  void run_until(const std::function<bool()>& done);
  // Wakes a run_until() waiting on this worker so it re-checks its condition.
  void notify();

  // The worker the calling thread belongs to, or nullptr for ordinary threads.
  static Worker* current();

 private:
  void loop();
  Device device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  uint64_t wake_epoch_ = 0;
  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace dp
