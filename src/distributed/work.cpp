// Work: completion state, waiting and continuations of one asynchronous collective.
#include "dp/distributed/work.h"

namespace dp::distributed {

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && !error_;
}

void Work::set_inline_runner(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  inline_runner_ = std::move(fn);
}

bool Work::wait(std::optional<std::chrono::milliseconds> timeout) {
  if (!timeout) {
    std::function<void()> run_here;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!done_) run_here = inline_runner_;
    }
    if (run_here) run_here();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout) {
    if (!cv_.wait_for(lock, *timeout, [&] { return done_; })) return false;
  } else {
    cv_.wait(lock, [&] { return done_; });
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::shared_ptr<Work> Work::then(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_) {
    continuations_.push_back(std::move(fn));
    return shared_from_this();
  }
  if (error_) return shared_from_this();
  lock.unlock();
  try {
    fn();
  } catch (...) {
    std::lock_guard<std::mutex> relock(mu_);
    error_ = std::current_exception();
  }
  return shared_from_this();
}

void Work::finish(std::exception_ptr error) {
  // Continuations run before the work counts as done, so a waiter sees their effect; one attached
  // while others run is taken in the next round (then() queues while !done_).
  for (;;) {
    std::vector<std::function<void()>> conts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error || continuations_.empty()) {
        done_ = true;
        error_ = error;
        continuations_.clear();
        break;
      }
      conts.swap(continuations_);
    }
    for (auto& fn : conts) {
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
        break;
      }
    }
  }
  cv_.notify_all();
}

std::shared_ptr<Work> Work::completed(std::string operation, std::vector<Tensor> outputs) {
  auto w = std::make_shared<Work>(std::move(operation));
  w->set_outputs(std::move(outputs));
  w->finish();
  return w;
}

}  // namespace dp::distributed
