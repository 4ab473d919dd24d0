// Background publishing and bounded reading of every rank's progress (progress_publisher.h).
#include "distributed/progress_publisher.h"
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <sstream>
#include "dp/core/errors.h"

namespace dp::distributed::detail {
namespace {

// Publishing costs a store request (a network round trip with TCPStore, and work in the store's
// server): at most 20 a second, so thousands of collectives a second cost the store nothing.
// A rank that times out waits longer than this (kProgressSettle) before reading everyone's.
constexpr std::chrono::milliseconds kMinInterval{50};

int64_t unix_ms_now() { return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// "<sequence> <operation> <started|finished> <unix_ms> <step> <phase>" ("-" for no operation or phase)
std::string encode(uint64_t sequence, const char* operation, bool finished, int64_t unix_ms, int64_t step, const char* phase) {
  return dp::detail::str(sequence, ' ', *operation ? operation : "-", ' ', finished ? "finished" : "started", ' ', unix_ms, ' ', step, ' ',
                         *phase ? phase : "-");
}

bool decode(const std::string& text, RankProgress& out) {
  std::istringstream in(text);
  std::string state;
  if (!(in >> out.sequence >> out.operation >> state >> out.unix_ms)) return false;
  out.finished = state == "finished";
  if (in >> out.step >> out.phase) {
    if (out.phase == "-") out.phase.clear();
  } else {
    out.step = -1;
    out.phase.clear();
  }
  // Another rank's words: printable, and short, before they reach a message.
  out.operation = printable_text(out.operation, 64);
  out.phase = printable_text(out.phase, 64);
  return state == "finished" || state == "started";
}

}  // namespace

std::string progress_key(int rank) { return "progress/" + std::to_string(rank); }

struct ProgressPublisher::State {
  std::shared_ptr<Store> store;
  std::string key;
  std::mutex mu;
  std::condition_variable cv;
  // The latest recorded value and its version; `sent` is the version last written (or attempted).
  uint64_t sequence = 0;
  const char* operation = "";
  bool finished = false;
  int64_t unix_ms = 0;
  int64_t step = -1;
  const char* phase = "";
  uint64_t version = 0;
  uint64_t sent = 0;
  bool stop = false;
  bool exited = false;
  bool idle = false;  // the thread waits for a new value (publish() must wake it)
  std::chrono::steady_clock::time_point last_write{};
};

ProgressPublisher::ProgressPublisher(std::shared_ptr<Store> store, int rank) : state_(std::make_shared<State>()) {
  state_->store = std::move(store);
  state_->key = progress_key(rank);
  thread_ = std::thread(&ProgressPublisher::run, state_);
}

ProgressPublisher::~ProgressPublisher() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
  // A write to a live store takes well under a millisecond; half a second means it is stuck.
  const bool exited = state_->cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return state_->exited; });
  lock.unlock();
  if (exited) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

void ProgressPublisher::publish(uint64_t sequence, const char* operation, bool finished) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->sequence = sequence;
    state_->operation = operation;
    state_->finished = finished;
    state_->unix_ms = unix_ms_now();
    ++state_->version;
    wake = state_->idle;
  }
  // Only an idle thread needs waking: one waiting out its interval takes the latest value anyway.
  if (wake) state_->cv.notify_all();
}

void ProgressPublisher::note(int64_t step, const char* phase) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->step == step && state_->phase == phase) return;  // nothing new: no store write
    state_->step = step;
    state_->phase = phase;
    ++state_->version;
    wake = state_->idle;
  }
  if (wake) state_->cv.notify_all();
}

std::string ProgressPublisher::position() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->step < 0 && *state_->phase == '\0') return "";
  return dp::detail::str("step ", state_->step, *state_->phase ? dp::detail::str(" (", state_->phase, ")") : std::string());
}

bool ProgressPublisher::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  const uint64_t target = state_->version;
  return state_->cv.wait_for(lock, timeout, [&] { return state_->sent >= target || state_->exited; });
}

void ProgressPublisher::run(std::shared_ptr<State> s) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->idle = true;
    s->cv.wait(lock, [&] { return s->stop || s->version != s->sent; });
    s->idle = false;
    if (s->stop) break;
    // At most one write per interval, whatever the rate of collectives; the values recorded
    // meanwhile coalesce into the latest, written when the interval is over.
    const auto next = s->last_write + kMinInterval;
    if (std::chrono::steady_clock::now() < next && s->cv.wait_until(lock, next, [&] { return s->stop; })) break;
    const uint64_t version = s->version;
    const std::string value = encode(s->sequence, s->operation, s->finished, s->unix_ms, s->step, s->phase);
    lock.unlock();
    try {
      s->store->set(s->key, value);
    } catch (...) {
      // A dead store must not take the group down: progress is diagnostics only. The timeout
      // report says so when it cannot read anyone's progress.
    }
    lock.lock();
    s->last_write = std::chrono::steady_clock::now();
    s->sent = version;
    s->cv.notify_all();
  }
  s->exited = true;
  s->cv.notify_all();
}

ProgressReport read_progress(const std::shared_ptr<Store>& store, int size, std::chrono::milliseconds budget) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    ProgressReport report;
  };
  auto shared = std::make_shared<Shared>();
  std::thread reader([shared, store, size] {
    ProgressReport report;
    try {
      for (int r = 0; r < size; ++r) {
        RankProgress p;
        p.rank = r;
        const std::string key = progress_key(r);
        if (store->check({key})) {
          const std::string text = store->get_string(key);
          p.known = decode(text, p);
          if (!p.known) p.operation = "unreadable progress '" + printable_text(text, 100) + "'";
        }
        report.ranks.push_back(std::move(p));
      }
      report.complete = true;
    } catch (const std::exception& e) {
      report.ranks.clear();
      report.error = e.what();
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->report = std::move(report);
    shared->done = true;
    shared->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, budget, [&] { return shared->done; })) {
    lock.unlock();
    reader.detach();  // it holds `shared` and `store` itself
    ProgressReport late;
    late.error = dp::detail::str("the store did not answer within ", budget.count(), " ms");
    return late;
  }
  ProgressReport report = std::move(shared->report);
  lock.unlock();
  reader.join();
  return report;
}

std::string describe_progress(const RankProgress& p) {
  const std::string where =
      p.step >= 0 || !p.phase.empty() ? dp::detail::str(" is at step ", p.step, p.phase.empty() ? "" : " (" + p.phase + ")", ",") : std::string();
  if (!p.known) return dp::detail::str("rank ", p.rank, where.empty() ? " has" : where + " and has", " not started any collective");
  if (p.operation == "-") return dp::detail::str("rank ", p.rank, where, " before its first collective");
  const double ago = static_cast<double>(unix_ms_now() - p.unix_ms) / 1000.0;
  char when[32];
  std::snprintf(when, sizeof when, "%.1f", ago < 0 ? 0.0 : ago);
  return dp::detail::str("rank ", p.rank, where.empty() ? " is at" : where, " collective #", p.sequence, " (", p.operation, ", ",
                         p.finished ? "finished" : "started", " ", when, " s ago)");
}

}  // namespace dp::distributed::detail
