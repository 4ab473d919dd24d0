// dp-run: starts the worker processes of a data-parallel job and watches them (docs/distributed.md,
// "Launching with dp-run"). One file per concern:
//   options         the command line (CLI11)
//   worker_env      each worker's environment: ranks, store, restart count, error file, core share
//   process         fork/exec into its own process group, killed when dp-run dies
//   signals         SIGINT/SIGTERM/SIGHUP/SIGCHLD through a self-pipe
//   supervisor      one attempt: start, watch, stop the rest on the first failure, collect exits
//   report          the one-line reports of failed workers
//   nodes           several nodes: joining, failures and the end of an attempt through the store
//   timeline_merge  --timeline: the ranks' Chrome traces into one file
//   job             hosting the store, the attempts and restarts, the exit status
#include "dp/core/threads.h"
#include <cstdio>
#include <exception>
#include "exit_codes.h"
#include "job.h"
#include "options.h"
#include "report.h"

int main(int argc, char** argv) {
  dp::reexec_for_blas_kernels(argv);  // OpenBLAS's kernels for this CPU, before it does any work
  dp::run::ParseResult parsed = dp::run::parse_args(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  try {
    return dp::run::run_job(*parsed.options);
  } catch (const std::exception& e) {
    dp::run::say(std::string("internal error: ") + e.what());
    return dp::run::kExitWorkerFailed;
  }
}
