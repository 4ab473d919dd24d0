#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
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
  // Drains the queue (every task queued before or while it drains, tasks may post more, still
  // runs), then joins the thread. Must not run on the worker's own thread.
  ~Worker();  // shutdown()
  // Drains the queue and joins the thread (idempotent). Several workers' tasks may notify each
  // other, so an owner of many workers shuts them all down before destroying any of them.
  void shutdown();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  Device device() const { return device_; }
  // Queues a task. A task should not throw (use submit() to get a result or an exception back);
  // if one does, the worker survives, the exception is kept and unhandled_error() returns the first.
  // Throws DeviceError once the worker's thread has finished (after destruction started and the
  // queue drained).
  void post(std::function<void()> task);
  // Queues f and returns a future for its result or exception.
  template <typename F>
  auto submit(F&& f) -> std::future<decltype(f())> {
    using R = decltype(f());
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    std::future<R> fut = task->get_future();
    post([task] { (*task)(); });
    return fut;
  }
  // True when called from this worker's own thread.
  bool is_current() const;
  // From the worker's own thread: run queued tasks until done() is true. done() is re-checked
  // after every task and whenever notify() is called, so a done() that becomes true in another
  // thread must be followed by notify(). Throws DeviceError from any other thread.
  void run_until(const std::function<bool()>& done);
  // Wakes a run_until() waiting on this worker so it re-checks its condition.
  void notify();

  // The first exception that escaped a post()ed task, or null.
  std::exception_ptr unhandled_error() const;

  // The worker the calling thread belongs to, or nullptr for ordinary threads.
  static Worker* current();

 private:
  void loop();
  // Pops the front task into `out` (under mu_). False if the queue is empty.
  bool pop(std::function<void()>& out);
  void run_task(std::function<void()>& task);

  Device device_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;      // destruction started: drain, then exit
  bool finished_ = false;  // the thread has left its loop: nothing posted now would run
  uint64_t wake_epoch_ = 0;
  std::exception_ptr unhandled_;
  std::thread thread_;
};

}  // namespace dp
