#pragma once
// A multi-process job for tests: a TCPStore server in the test process and one WorkerProcess per
// rank with the environment a launcher gives (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, DP_STORE_HOSTED=1, DP_STORE_TOKEN, DP_DIST_TIMEOUT, one CPU device and one
// BLAS thread).
#include <memory>
#include <string>
#include <vector>
#include "distributed/workers/worker_process.h"
#include "dp/distributed/store.h"

namespace dp::test {

class WorkerJob {
 public:
  // args[r]: rank r's arguments (the world size is args.size()); extra_env entries ("NAME=value")
  // replace a default of the same name or add to them.
  WorkerJob(const std::string& program, const std::vector<std::vector<std::string>>& args, double timeout_seconds,
            const std::vector<std::string>& extra_env = {})
      : server_("127.0.0.1", 0, server_options()) {
    const int size = static_cast<int>(args.size());
    for (int r = 0; r < size; ++r) {
      std::vector<std::string> env{"RANK=" + std::to_string(r),
                                   "WORLD_SIZE=" + std::to_string(size),
                                   "LOCAL_RANK=" + std::to_string(r),
                                   "LOCAL_WORLD_SIZE=" + std::to_string(size),
                                   "MASTER_ADDR=127.0.0.1",
                                   "MASTER_PORT=" + std::to_string(server_.port()),
                                   "DP_STORE_HOSTED=1",
                                   "DP_STORE_TOKEN=" + kToken,
                                   "DP_DIST_TIMEOUT=" + std::to_string(timeout_seconds),
                                   "DP_DISTRIBUTED_DEBUG=0",
                                   "DP_CPU_DEVICES=1",
                                   "OPENBLAS_NUM_THREADS=1"};
      for (const std::string& extra : extra_env) {
        const std::string name = extra.substr(0, extra.find('=') + 1);
        std::erase_if(env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
        env.push_back(extra);
      }
      ranks_.push_back(std::make_unique<WorkerProcess>(program, args[static_cast<size_t>(r)], env));
    }
  }
  WorkerProcess& operator[](int rank) { return *ranks_[static_cast<size_t>(rank)]; }
  int size() const { return static_cast<int>(ranks_.size()); }
  // Everything every rank printed, for failure messages.
  std::string outputs() const {
    std::string all;
    for (size_t r = 0; r < ranks_.size(); ++r) all += "--- rank " + std::to_string(r) + ":\n" + ranks_[r]->output();
    return all;
  }

 private:
  // The store's token, given to the ranks in their environment as a launcher does.
  inline static const std::string kToken = "worker-job-token-0123456789abcdef";
  static distributed::TCPStoreServerOptions server_options() {
    distributed::TCPStoreServerOptions o;
    o.token = kToken;
    return o;
  }
  distributed::TCPStoreServer server_;
  std::vector<std::unique_ptr<WorkerProcess>> ranks_;
};

}  // namespace dp::test
