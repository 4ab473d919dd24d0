#pragma once
// Work: the handle of one asynchronous collective (c10d's Work). A process group runs its
// operations in issue order on its communication thread; the Work completes when the operation
// has finished on this rank (its output tensors then hold the result) or has failed.
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include "dp/core/tensor.h"

namespace dp::distributed {

class Work : public std::enable_shared_from_this<Work> {
 public:
  explicit Work(std::string operation, uint64_t sequence = 0) : operation_(std::move(operation)), sequence_(sequence) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Finished, successfully or not (never blocks).
  bool is_completed() const;
  bool is_success() const;
  // Blocks until the work completes and rethrows its error, if any (its own type: PeerLostError,
  // CollectiveTimeout, ...). With a timeout: returns false if the work has not completed by then
  // (the operation goes on; the group's own timeout still bounds it).
  bool wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // The error it failed with (null while running or after success).
  std::exception_ptr exception() const;
  // The tensors that hold the result (the operation's outputs), once completed.
  const std::vector<Tensor>& result() const { return outputs_; }

  // Runs fn after a successful completion, before waiters wake (on the thread that completes the
  // work; at once on this thread if the work has already succeeded). An exception from fn fails
  // the work with that exception. Returns this work, so calls chain. Comm hooks use it to turn a
  // reduced low-precision copy back into the gradient bucket.
  std::shared_ptr<Work> then(std::function<void()> fn);

  const std::string& operation() const { return operation_; }  // "allreduce", "broadcast", ...
  uint64_t sequence() const { return sequence_; }              // the group's collective number

  // ---- for backends ----
  void set_outputs(std::vector<Tensor> outputs) { outputs_ = std::move(outputs); }
  // Completes the work (error == nullptr: success), runs the continuations, wakes the waiters.
  void finish(std::exception_ptr error = nullptr);
  // An already-completed work (success), e.g. for an operation with nothing to do.
  static std::shared_ptr<Work> completed(std::string operation, std::vector<Tensor> outputs = {});
  // A function wait() (without a timeout) calls before blocking: the backend may run the operation
  // on the waiting thread when nothing else is running it, which saves the two thread hand-offs of
  // a collective that is waited for right away.
  void set_inline_runner(std::function<void()> fn);

 private:
  std::string operation_;
  uint64_t sequence_;
  std::vector<Tensor> outputs_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<std::function<void()>> continuations_;
  std::function<void()> inline_runner_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace dp::distributed
