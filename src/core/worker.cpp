#include "dp/core/worker.h"
#include "dp/core/errors.h"

namespace dp {
namespace {
thread_local Worker* tls_current_worker = nullptr;
}

Worker::Worker(Device device) : device_(device) {
  thread_ = std::thread([this] {
    tls_current_worker = this;
    loop();
  });
}

Worker::~Worker() { shutdown(); }

void Worker::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
}

Worker* Worker::current() { return tls_current_worker; }

bool Worker::is_current() const { return tls_current_worker == this; }

void Worker::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    DP_CHECK(!finished_, DeviceError, "the worker of ", device_.str(), " has shut down; no more work can be queued on it");
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();  // only this worker's thread waits on cv_
}

void Worker::notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wake_epoch_;
  }
  cv_.notify_one();
}

std::exception_ptr Worker::unhandled_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unhandled_;
}

bool Worker::pop(std::function<void()>& out) {
  if (queue_.empty()) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void Worker::run_task(std::function<void()>& task) {
  try {
    task();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!unhandled_) unhandled_ = std::current_exception();
  }
  task = nullptr;  // release what the task captured before waiting for the next one
}

void Worker::loop() {
  std::function<void()> task;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (!pop(task)) {  // stop requested and nothing left
        finished_ = true;
        return;
      }
    }
    run_task(task);
  }
}

void Worker::run_until(const std::function<bool()>& done) {
  DP_CHECK(is_current(), DeviceError, "Worker::run_until must be called from the worker's own thread (", device_.str(), ")");
  std::function<void()> task;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Read the epoch before checking done(): a notify() that follows done() becoming true then
    // either shows in done() or changes the epoch, so the wait below cannot miss it.
    const uint64_t epoch = wake_epoch_;
    lock.unlock();
    if (done()) return;
    lock.lock();
    cv_.wait(lock, [&] { return !queue_.empty() || wake_epoch_ != epoch; });
    if (pop(task)) {
      lock.unlock();
      run_task(task);
      lock.lock();
    }
  }
}

}  // namespace dp
