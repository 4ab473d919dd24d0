#pragma once
// Ranks as threads for the DistributedDataParallel tests: each thread is one rank of a Gloo group
// that meets in a shared HashStore (TCP on loopback underneath, as between processes). DDP holds
// its group by shared pointer, hence these instead of process_group_ranks.h's run_ranks.
#include <gtest/gtest.h>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#include "dp/distributed/process_group.h"
#include "dp/distributed/store.h"

namespace dp::distributed::test {

// Runs fn(group, rank) on `world` threads and returns each rank's exception (null if none). One
// rank's failure does not hang the others for longer than `timeout`: their collectives time out.
inline std::vector<std::exception_ptr> run_ranks_collect(int world, const std::function<void(const ProcessGroupPtr&, int)>& fn,
                                                         std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = std::make_shared<HashStore>(timeout);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        ProcessGroupOptions options;
        options.timeout = timeout;
        fn(make_gloo_process_group(store, r, world, options), r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// The same, reporting every rank's exception as a test failure.
inline void run_ranks(int world, const std::function<void(const ProcessGroupPtr&, int)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const std::vector<std::exception_ptr> errors = run_ranks_collect(world, fn, timeout);
  for (int r = 0; r < world; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " threw: " << e.what();
    }
  }
}

}  // namespace dp::distributed::test
