#include "dp/parallel/detail/run.h"
#include <condition_variable>
#include <mutex>

namespace dp::parallel::detail {

std::vector<std::exception_ptr> run_on_workers(const std::vector<Worker*>& targets, const std::function<void(size_t)>& fn) {
  const size_t n = targets.size();
  std::vector<std::exception_ptr> errors(n);
  struct Latch {
    std::mutex mu;
    std::condition_variable cv;
    size_t remaining = 0;
  } latch;
  Worker* caller = Worker::current();
  auto finish = [&latch, caller] {
    // Notify under the lock: the caller may return (and destroy the latch) as soon as it sees 0.
    std::lock_guard<std::mutex> lock(latch.mu);
    if (--latch.remaining == 0) {
      latch.cv.notify_all();
      if (caller) caller->notify();
    }
  };
  std::vector<size_t> inline_items;
  for (size_t i = 0; i < n; ++i) {
    if (!targets[i]) {
      inline_items.push_back(i);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(latch.mu);
      ++latch.remaining;
    }
    try {
      targets[i]->post([&fn, &errors, &finish, i] {
        try {
          fn(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
        finish();
      });
    } catch (...) {  // the worker is shutting down
      errors[i] = std::current_exception();
      std::lock_guard<std::mutex> lock(latch.mu);
      --latch.remaining;
    }
  }
  for (size_t i : inline_items) {
    try {
      fn(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  if (caller) {
    caller->run_until([&latch] {
      std::lock_guard<std::mutex> lock(latch.mu);
      return latch.remaining == 0;
    });
  }
  std::unique_lock<std::mutex> lock(latch.mu);
  latch.cv.wait(lock, [&latch] { return latch.remaining == 0; });
  return errors;
}

}  // namespace dp::parallel::detail
