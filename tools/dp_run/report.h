#pragma once
// What dp-run prints: every line starts with "dp-run: " and goes to stderr in one write (lines of
// several processes sharing a pipe do not mix). A failed worker is one line:
//   dp-run: rank 1 (node 0, local 1, pid 4242) was killed by SIGKILL after 12.3 s
//   dp-run: rank 0 (node 0, local 0, pid 4241) exited with status 3 after 12.4 s: PeerLostError: allreduce #42 ...
//   dp-run: rank 2 (node 0, local 2, pid 4243) was stopped by dp-run (SIGTERM) after 12.9 s
// The text after the colon is what the worker recorded in its error file (dp/distributed/launch.h);
// "(no error recorded)" when a worker that exited with a failing status wrote none.
#include <sys/types.h>
#include <optional>
#include <string>
#include <vector>
#include "dp/distributed/launch.h"

namespace dp::run {

// Prints "dp-run: <text>\n" on stderr, the text made printable first (dp::distributed::
// printable_text, not clipped): no control character, terminal escape or newline of a worker or of
// another node reaches the terminal, and a report is always one line.
void say(const std::string& text);

struct WorkerExit {
  int rank = 0;
  int node = 0;
  int local_rank = 0;
  pid_t pid = 0;
  double seconds = 0;   // from start to exit
  int wait_status = 0;  // waitpid's
  int stop_signal = 0;  // the signal dp-run sent it before it exited (0: none)
  std::optional<dp::distributed::RecordedError> error;
};

// Whether the worker ended other than with exit status 0.
bool failed(const WorkerExit& w);
// Whether its failure was the consequence of another's: it recorded a PeerLostError, died of
// SIGPIPE (a peer died first), or exited with 128 + SIGINT/SIGTERM/SIGHUP without an error and
// without a signal from dp-run (its job's ranks stopped together on a signal that came elsewhere). When several workers fail together, the first
// failure reported is one that is not.
bool is_consequence(const WorkerExit& w);
// Whether it recorded a timeout (CollectiveTimeout, StoreTimeout, RendezvousError): when a network
// cut is known, the cut is named as the first failure instead.
bool is_timeout(const WorkerExit& w);
// Of failed workers in the order they were collected, the index of the one to report as the first
// failure: the first that is not a consequence, else the first. npos for none.
size_t pick_first_failure(const std::vector<WorkerExit>& failures);
// Its report line, without the "dp-run: " prefix.
std::string describe(const WorkerExit& w);
// The exit status a shell would show: the status, or 128 + the signal.
int shell_status(int wait_status);
// "12.3"
std::string seconds_text(double s);
// The error's text on one line, at most max_chars long.
std::string one_line(const std::string& text, size_t max_chars = 4000);

}  // namespace dp::run
