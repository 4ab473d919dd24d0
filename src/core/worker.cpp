#include "dp/core/worker.h"

namespace dp {
namespace {
thread_local Worker* tls_current_worker = nullptr;
}

Worker::Worker(Device device) : device_(device) {
  thread_ = std::thread([this] {
    tls_current_worker = this;
    loop();
  });
  thread_id_ = thread_.get_id();
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Worker* Worker::current() { return tls_current_worker; }

void Worker::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void Worker::notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wake_epoch_;
  }
  cv_.notify_all();
}

void Worker::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // tasks report their own errors (futures, graph tasks); none escapes here
  }
}

void Worker::run_until(const std::function<bool()>& done) {
  for (;;) {
    if (done()) return;
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      uint64_t epoch = wake_epoch_;
      cv_.wait(lock, [&] { return !queue_.empty() || wake_epoch_ != epoch; });
      if (queue_.empty()) continue;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace dp
