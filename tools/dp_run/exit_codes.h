#pragma once
// dp-run's exit statuses (docs/distributed.md, "Launching with dp-run").
namespace dp::run {

constexpr int kExitOk = 0;            // every worker exited with status 0
constexpr int kExitWorkerFailed = 1;  // a worker failed (here or on another node), restarts used up
constexpr int kExitBadArguments = 2;  // the command line is wrong (the message names the option)
constexpr int kExitCannotStart = 3;   // the store's port is taken, the nodes did not meet, the program cannot run
// Stopped by a signal: 128 + its number (130 SIGINT = Ctrl-C, 143 SIGTERM, 129 SIGHUP).
constexpr int kExitSignalBase = 128;

}  // namespace dp::run
