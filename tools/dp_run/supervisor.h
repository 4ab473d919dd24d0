#pragma once
// One attempt of the job on this node: start the local workers, watch them, and on the first
// abnormal exit (or another node's failure, or Ctrl-C) stop the rest:
//   - a worker exits with a status other than 0 or dies of a signal: its line is printed at once
//     (and handed to the other nodes); the others get kSettle to notice by themselves (a lost peer
//     is an error in milliseconds, and they record it), then SIGTERM (with SIGCONT, for a stopped
//     one), then SIGKILL after the grace period;
//   - SIGINT/SIGTERM to dp-run: passed on to every worker at once (SIGHUP as SIGTERM), SIGKILL
//     after the grace period; a second one sends SIGKILL at once.
// Every exit is collected with waitpid; a worker that outlives SIGKILL by 10 s is reported and left.
#include <sys/types.h>
#include <chrono>
#include <optional>
#include <string>
#include <vector>
#include "nodes.h"
#include "report.h"

namespace dp::run {

constexpr std::chrono::milliseconds kSettle{1000};

struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  std::vector<std::string> env;
  std::string error_file;
};

struct AttemptSpec {
  std::string program;            // resolved path
  std::vector<std::string> argv;  // argv[0] as the user typed it
  int node_rank = 0;
  int world_size = 1;
  int attempt = 0;
  std::vector<WorkerSpec> workers;
  double grace_s = 5;
  bool quiet = false;
  NodeCoordinator* nodes = nullptr;  // several nodes: the other nodes' failures, ours to them
};

enum class Outcome { kSucceeded, kFailed, kInterrupted, kCannotStart };

struct AttemptResult {
  Outcome outcome = Outcome::kSucceeded;
  int signal = 0;                           // kInterrupted: the signal dp-run got
  std::vector<WorkerExit> exits;            // every worker that was started, in rank order
  std::optional<WorkerExit> first_failure;  // this node's first failed worker
  std::optional<RemoteFailure> remote;      // another node's failure stopped this one
  std::optional<std::string> store_lost;    // the store stopped answering during the attempt
  std::string start_error;                  // kCannotStart
};

AttemptResult run_attempt(const AttemptSpec& spec);

}  // namespace dp::run
