#pragma once
// Ranks as threads for the DistributedDataParallel tests: each thread is one rank of a Gloo group
// that meets in a shared HashStore (TCP on loopback underneath, as between processes).
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

// Runs fn(group, rank) on `world` threads and reports every rank's exception as a test failure
// (each rank's own failures do not hang the others for longer than `timeout`: their collectives
// time out).
inline void run_ranks(int world, const std::function<void(const ProcessGroupPtr&, int)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = std::make_shared<HashStore>(timeout);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        ProcessGroupOptions options;
        options.timeout = timeout;
        ProcessGroupPtr group = make_gloo_process_group(store, r, world, options);
        fn(group, r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " threw: " << e.what();
    }
  }
}

// The same, returning each rank's exception instead of failing (for tests that expect errors).
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

}  // namespace dp::distributed::test
