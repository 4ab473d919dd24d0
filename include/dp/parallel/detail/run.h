#pragma once
// Running one function per target on device workers, waiting for all of them (parallel_apply and
// the parallel gradient reduction use it).
#include <cstddef>
#include <exception>
#include <functional>
#include <vector>
#include "dp/core/worker.h"

namespace dp::parallel::detail {

// Runs fn(i) for every i in [0, targets.size()): on targets[i]'s thread, or in the calling thread
// where targets[i] is null. Returns when all have finished (never earlier, even if some threw), with
// each call's exception (null where it succeeded). Called from a worker, the wait keeps serving that
// worker's queue, so a target equal to the caller's own worker cannot deadlock.
std::vector<std::exception_ptr> run_on_workers(const std::vector<Worker*>& targets, const std::function<void(size_t)>& fn);

}  // namespace dp::parallel::detail
