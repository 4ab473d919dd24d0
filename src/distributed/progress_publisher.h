#pragma once
// Progress diagnostics: every rank keeps "progress/<rank>" in its group's store up to date with the
// collective it is in (sequence number, operation, started or finished, wall-clock time) and where
// its program says it is (training step and phase: ProcessGroup::note_progress), so that a
// rank whose collective times out can say who is behind and where. Publishing must never slow the
// hot path: publish() only records the value (and wakes a background thread if it is idle); the
// thread writes at most one value per 50 ms, always the latest (values recorded meanwhile
// coalesce), with at most one store request in flight.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include "dp/distributed/store.h"

namespace dp::distributed::detail {

// The store key of a rank's progress (in the group's prefixed store).
std::string progress_key(int rank);

class ProgressPublisher {
 public:
  ProgressPublisher(std::shared_ptr<Store> store, int rank);
  // Stops the thread. A write stuck on a hung store is not waited for beyond a short grace period:
  // the thread is then left to finish on its own (it owns everything it touches).
  ~ProgressPublisher();
  ProgressPublisher(const ProgressPublisher&) = delete;
  ProgressPublisher& operator=(const ProgressPublisher&) = delete;

  // Records this rank's position; `operation` must be a string literal (it is kept by pointer:
  // no allocation on the hot path). Never blocks on the store.
  void publish(uint64_t sequence, const char* operation, bool finished);
  // Records the program's position: `phase` must be a string literal without spaces (kept by
  // pointer). Never blocks on the store.
  void note(int64_t step, const char* phase);
  // "step 41 (backward)" from the last note; empty when nothing was noted.
  std::string position() const;
  // Waits up to `timeout` until the latest recorded value has been written (or failed to be).
  bool flush(std::chrono::milliseconds timeout);

 private:
  struct State;
  static void run(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
  std::thread thread_;
};

// One rank's progress as read back from the store.
struct RankProgress {
  int rank = -1;
  bool known = false;  // false: the rank has published nothing yet (it has not started a collective)
  uint64_t sequence = 0;
  std::string operation;
  bool finished = false;
  int64_t unix_ms = 0;  // when it was recorded (wall clock of that rank's machine)
  int64_t step = -1;    // the program's step and phase (note_progress); -1 / empty when never noted
  std::string phase;
};

struct ProgressReport {
  bool complete = false;            // every rank's key was read (absent keys count as read)
  std::string error;                // why not, when !complete
  std::vector<RankProgress> ranks;  // one per rank, in rank order, when complete
};

// Reads every rank's progress within `budget`. The reads run on a helper thread, so a hung or dead
// store costs at most the budget (the helper is then abandoned to finish on its own).
ProgressReport read_progress(const std::shared_ptr<Store>& store, int size, std::chrono::milliseconds budget);

// "rank 1 is at step 41 (forward), collective #40 (broadcast, finished 2.1 s ago)" / "rank 1 has not
// started any collective"
std::string describe_progress(const RankProgress& p);

}  // namespace dp::distributed::detail
