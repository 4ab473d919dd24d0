#pragma once
// dp-run's command line: what to start (PROGRAM ARGS after "--"), how many workers where, and how
// to supervise them.
#include <optional>
#include <string>
#include <vector>
#include "dp/distributed/store.h"

namespace dp::run {

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;      // --nnodes N or MIN:MAX: MAX (N)
  int nnodes_min = 1;  // MIN (N); elastic when MIN < MAX
  int node_rank = 0;   // elastic: 0 on the node that hosts the store (--node-rank 0), -1 elsewhere (assigned at the rendezvous)
  // Where the store is: one node: 127.0.0.1 (the store is this dp-run's, on a free port unless
  // --master-port is given); several: node 0's address, on master_port (default 29500).
  std::string master_addr;  // empty: 127.0.0.1
  int master_port = -1;     // -1: not given
  int max_restarts = 0;
  std::optional<double> timeout_s;       // --timeout: exported as DP_DIST_TIMEOUT
  double grace_s = 5.0;                  // SIGTERM -> SIGKILL
  double rdzv_timeout_s = 300.0;         // how long the nodes wait for each other
  double last_call_s = 3.0;              // elastic: once MIN nodes joined, how long node 0 waits for more (up to MAX)
  std::optional<double> node_timeout_s;  // --node-timeout: a node silent this long is lost (default: the job's timeout + 2 s, at least 15 s)
  std::string run_id;                    // empty: generated (several nodes: node 0's is used)
  std::string timeline;                  // --timeline FILE.json
  std::string token_file;                // --token-file: the job's store token (several nodes: the same file contents everywhere)
  std::string store_bind;                // --store-bind: where the store listens (empty: the master address)
  // --store-limit NAME=VALUE: the store server's limits (its token and max_wait are set by the job).
  dp::distributed::TCPStoreServerOptions store_limits;
  bool quiet = false;
  std::vector<std::string> command;  // PROGRAM ARGS...

  bool multi_node() const { return nnodes > 1; }
  bool elastic() const { return nnodes_min < nnodes; }
  std::string master() const { return master_addr.empty() ? "127.0.0.1" : master_addr; }
};

struct ParseResult {
  std::optional<Options> options;  // empty: exit with exit_code (--help: 0, an error: 2)
  int exit_code = 0;
};

ParseResult parse_args(int argc, char** argv);

// Applies one --store-limit NAME=VALUE to `limits`; false (and *error says why) when it is not one.
bool apply_store_limit(const std::string& spec, dp::distributed::TCPStoreServerOptions& limits, std::string* error);

// A run id is 1-64 characters of [A-Za-z0-9._-] (it becomes a store key prefix and a file name part).
bool valid_run_id(const std::string& id);

}  // namespace dp::run
