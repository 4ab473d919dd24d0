// The group's first failure notice in its store (failure_notice.h).
#include "distributed/failure_notice.h"
#include <condition_variable>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

namespace dp::distributed::detail {
namespace {

const char* const kKey = "failure";

// Runs fn on a helper thread; true if it finished within budget (else the thread is left to finish
// on its own: it owns what it touches).
bool run_bounded(std::function<void()> fn, std::chrono::milliseconds budget) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto shared = std::make_shared<Shared>();
  std::thread helper([shared, fn = std::move(fn)] {
    try {
      fn();
    } catch (...) {
      // The store is gone or refused: the notice is a courtesy, the error report goes on without it.
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->done = true;
    shared->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(shared->mu);
  const bool done = shared->cv.wait_for(lock, budget, [&] { return shared->done; });
  lock.unlock();
  if (done)
    helper.join();
  else
    helper.detach();
  return done;
}

std::string encode(const FailureNotice& n) { return std::to_string(n.writer) + " " + std::to_string(n.culprit) + " " + n.text; }

std::optional<FailureNotice> decode(const std::string& s) {
  std::istringstream in(s);
  FailureNotice n;
  if (!(in >> n.writer >> n.culprit)) return std::nullopt;
  std::getline(in >> std::ws, n.text);
  n.text = printable_text(n.text, 2000);  // another rank's words, before they reach a message
  return n;
}

}  // namespace

void publish_failure_notice(const std::shared_ptr<Store>& store, const FailureNotice& notice, std::chrono::milliseconds budget) {
  const std::string value = encode(notice);
  run_bounded([store, value] { store->compare_set(kKey, {}, Bytes(value.begin(), value.end())); }, budget);
}

std::optional<FailureNotice> read_failure_notice(const std::shared_ptr<Store>& store, std::chrono::milliseconds budget) {
  auto result = std::make_shared<std::optional<FailureNotice>>();
  auto mu = std::make_shared<std::mutex>();
  const bool done = run_bounded(
      [store, result, mu] {
        if (!store->check({kKey})) return;
        auto n = decode(store->get_string(kKey));
        std::lock_guard<std::mutex> lock(*mu);
        *result = std::move(n);
      },
      budget);
  if (!done) return std::nullopt;
  std::lock_guard<std::mutex> lock(*mu);
  return *result;
}

}  // namespace dp::distributed::detail
