#pragma once
// The environment of each worker: the launcher variables init_process_group reads, the restart
// count, run id and error file of dp/distributed/launch.h, and the worker's share of the cores.
#include <optional>
#include <string>
#include <vector>

namespace dp::run {

// What every worker of one attempt on this node shares.
struct AttemptEnv {
  int world_size = 1;
  int nproc_local = 1;  // LOCAL_WORLD_SIZE
  int node_rank = 0;    // GROUP_RANK
  int nnodes = 1;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  int restart_count = 0;
  int max_restarts = 0;
  std::string store_prefix;         // DP_STORE_PREFIX: "<run id>/attempt<restart count>"
  std::optional<double> timeout_s;  // DP_DIST_TIMEOUT
  int cpu_share = 1;                // cores per worker
  std::string store_token;          // DP_STORE_TOKEN: the job's secret (in the environment only)
};

// One worker's own values.
struct WorkerEnv {
  int rank = 0;
  int local_rank = 0;
  std::string error_file;
  std::string timeline_file;  // empty: no timeline
};

// `inherited` ("NAME=value" entries, dp-run's own environment) with the worker's variables set.
// DP_CPU_DEVICES, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are set to cpu_share only where
// `inherited` does not set them: a user's choice wins.
std::vector<std::string> worker_environment(const std::vector<std::string>& inherited, const AttemptEnv& attempt, const WorkerEnv& worker);

// dp-run's environment as entries.
std::vector<std::string> current_environment();
// The value of `name` in entries; nullopt when absent.
std::optional<std::string> env_value(const std::vector<std::string>& entries, const std::string& name);

// The cores this process may run on (sched_getaffinity; at least 1).
int available_cores();
// Each of n local workers' share: max(1, cores / n).
inline int cpu_share(int cores, int n) { return n > 0 && cores / n > 1 ? cores / n : 1; }

}  // namespace dp::run
