#pragma once
// The whole job on this node: host the store (one node, or node 0), meet the other nodes, run
// attempts (run_attempt) until one succeeds, the restarts are used up, or dp-run is interrupted;
// merge the timeline. Returns dp-run's exit status (exit_codes.h).
#include "options.h"

namespace dp::run {

int run_job(const Options& options);

}  // namespace dp::run
