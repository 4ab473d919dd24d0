#pragma once
// What a rank tells the others when its group breaks. A lost peer is only seen by the ranks that
// talk to it in the collective at hand: in a ring of 3, the rank waiting on a survivor would wait
// for its whole timeout, and then blame that survivor. So a rank whose collective fails (1) writes
// a notice to the group's store, the first one winning ("rank 2: lost rank 1 in allreduce #7 ..."),
// and (2) closes its connections, so every rank blocked on it fails at once; a rank that then
// finds a closed connection reads the notice and names the rank that failed first.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include "dp/distributed/store.h"

namespace dp::distributed::detail {

struct FailureNotice {
  int writer = -1;   // the rank that wrote it
  int culprit = -1;  // the rank it blames (-1: none known)
  std::string text;  // its error message
};

// Store calls bounded by `budget` (run on a helper thread that is abandoned if the store hangs):
// a dead or hung store must not delay the error report.
void publish_failure_notice(const std::shared_ptr<Store>& store, const FailureNotice& notice, std::chrono::milliseconds budget);
std::optional<FailureNotice> read_failure_notice(const std::shared_ptr<Store>& store, std::chrono::milliseconds budget);

}  // namespace dp::distributed::detail
