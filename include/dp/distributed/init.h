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
//
// The store is authenticated (docs/distributed.md, "Security"): every rank must hold the job's
// token, from (the first that is given) InitOptions::store_token, a token file named by
// InitOptions::store_token_file, DP_STORE_TOKEN (dp-run sets it; init_process_group removes it from
// the environment once read, so programs this one starts do not inherit it), or a token file named
// by DP_STORE_TOKEN_FILE. Rank 0, when it hosts the store, writes a new token (mode 0600) to a token
// file that does not exist yet; the other ranks wait for it and read it. Without any, a world of more
// than one rank is refused unless InitOptions::insecure_store or DP_STORE_INSECURE=1 asks for a
// store open to anyone who can reach its port.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include "dp/distributed/process_group.h"
#include "dp/distributed/store.h"

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
  // A store made by the caller (then master_addr/port and the token options are not used).
  std::shared_ptr<Store> store;
  // The store's token (see above): empty means DP_STORE_TOKEN, then the token file.
  std::string store_token;
  std::string store_token_file;  // empty: DP_STORE_TOKEN_FILE
  // No token: a store open to anyone who can reach its port (throwaway runs on a trusted machine).
  bool insecure_store = false;
  // Rank 0's server when it hosts the store: its limits (its token comes from above, and its
  // max_wait is the group's timeout plus 10 s: a parked wait never outlives the job's timeout).
  TCPStoreServerOptions store_server;
  ProcessGroupOptions group;
};

ProcessGroupPtr init_process_group(InitOptions options = {});

// The local IP address a connection to `host` would leave from (a connected UDP socket; nothing is
// sent). Loopback for a loopback host. Throws DistributedError naming `host` if it cannot be
// resolved or routed.
std::string local_address_towards(const std::string& host);

// DP_STORE_TOKEN: read once, then removed from the environment (later calls return the same
// token, or a new DP_STORE_TOKEN if one was set meanwhile); empty when it was never set.
std::string store_token_from_environment();

}  // namespace dp::distributed
