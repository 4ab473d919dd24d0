#pragma once
// Ranks as threads for process-group tests: `size` threads of this process, each forming its own
// gloo group (its own connections on loopback) through one shared HashStore. Fast and fork-free;
// the real multi-process paths are in test_process_group_processes.cpp.
#include <gtest/gtest.h>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include "dp/distributed/process_group.h"
#include "dp/distributed/store.h"

namespace dp::distributed::testing {

// Short timeouts: a test that goes wrong fails in seconds instead of hanging.
inline ProcessGroupOptions options_with_timeout(std::chrono::milliseconds timeout, std::string name = "default") {
  ProcessGroupOptions o;
  o.timeout = timeout;
  o.name = std::move(name);
  return o;
}

// Runs body(rank, group) on one thread per rank and joins them all. An exception escaping a rank
// (making its group included) is a test failure that names the rank. Every thread ends: each
// operation is bounded by the group's timeout.
inline void run_ranks(int size, const std::function<void(int, ProcessGroup&)>& body,
                      ProcessGroupOptions options = options_with_timeout(std::chrono::seconds(10)), std::shared_ptr<Store> store = nullptr) {
  if (!store) store = std::make_shared<HashStore>(options.timeout);
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessGroupPtr group = make_gloo_process_group(store, r, size, options);
        body(r, *group);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << size;
}

}  // namespace dp::distributed::testing
