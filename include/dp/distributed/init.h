#pragma once
// init_process_group: forms the default group of a training job from explicit arguments or from
// the environment the launcher set, so the launchers people already use work unchanged:
//  - dp-run and torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//  - Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//    OMPI_COMM_WORLD_LOCAL_SIZE (MASTER_ADDR and MASTER_PORT must still be given: mpirun exports
//    them with -x)
//  - Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (MASTER_ADDR,
//    MASTER_PORT as for mpirun; SLURM_LAUNCH_NODE_IPADDR stands in for MASTER_ADDR when unset)
// The first set that is present wins, in that order; a missing or malformed variable is a
// ValueError that names it. The store is a TCPStore at MASTER_ADDR:MASTER_PORT, hosted by rank 0
// (or by the launcher when DP_STORE_HOSTED=1); the transport binds the local address that routes
// to MASTER_ADDR (not whatever the host name resolves to). DP_STORE_PREFIX, when set, puts the
// group's keys under that prefix (dp-run gives every restart attempt its own).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include "dp/distributed/process_group.h"

namespace dp::distributed {

struct Environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;    // empty when not given
  uint16_t master_port = 0;   // 0 when not given
  bool store_hosted = false;  // DP_STORE_HOSTED=1: the launcher runs the store server
  std::string source;         // "torchrun", "mpirun" or "srun": which variables were read
};

// Reads the environment through `getenv` (tests pass their own). Throws ValueError naming the
// variable that is missing or malformed; nullopt when none of the three launchers' variables are set.
std::optional<Environment> read_environment(const std::function<const char*(const char*)>& getenv);
std::optional<Environment> read_environment();

struct InitOptions {
  std::string backend = "gloo";
  // Unset fields come from the environment (read_environment); with neither, a ValueError that
  // says what to set.
  std::optional<int> rank;
  std::optional<int> world_size;
  std::string master_addr;
  std::optional<uint16_t> master_port;
  // A store made by the caller (then master_addr/port are not used).
  std::shared_ptr<Store> store;
  ProcessGroupOptions group;
};

ProcessGroupPtr init_process_group(InitOptions options = {});

// The local IP address a connection to `host` would leave from (a connected UDP socket; nothing is
// sent). Loopback for a loopback host. Throws DistributedError naming `host` if it cannot be
// resolved or routed.
std::string local_address_towards(const std::string& host);

}  // namespace dp::distributed
