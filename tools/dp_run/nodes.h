#pragma once
// Several nodes: each node's dp-run (an "agent") talks to the others through the job's TCPStore
// (hosted by node 0's dp-run, authenticated with the job's token). Keys, all under "dp-run/":
//   config                      node 0's run id, node count, restart limit and timeout (the job's)
//   mismatch                    a node started with another --nnodes or --timeout says so here, and
//                               every node that waits for the others stops at once with its words
//   <run>/a<A>/claim/node<K>    {"host", "pid", "id"} of the dp-run that is node K (compare_set: a
//                               second dp-run with the same --node-rank is refused, by name)
//   <run>/a<A>/node<K>          {"nproc", "host", "pid"}: node K joined attempt A
//   <run>/a<A>/failed           {"node", "line", "consequence", "timed_out"}: the first failure
//                               reported in attempt A (compare_set: first wins); every node stops
//                               its workers when it appears
//   <run>/a<A>/failure/node<K>  node K's own first failure, written at the end of the attempt
//   <run>/a<A>/done/node<K>     {"ok"}: node K's workers of attempt A are gone
//   <run>/a<A>/bye/node<K>      node K has seen every node done (node 0 may close the store)
//   <run>/hb/node<K>            a counter node K's watcher writes every 0.5 s (set: idempotent)
// Every value read is checked: a malformed one is an error naming the key, never a crash. Text
// from other nodes is made printable (printable_text) before it is printed.
// Waiting in the main thread (joining, the end of an attempt) polls every 100 ms, so Ctrl-C is
// obeyed; during an attempt a watcher thread with its own connection polls the failure key and
// writes what the supervisor hands it, so the supervisor never blocks on the network. Both
// connections ride out a network cut shorter than the job's timeout (they reconnect and send
// again); node 0's watcher names a node whose heartbeat stood still longer than that.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include "dp/distributed/store.h"

namespace dp::run {

// The nodes could not meet (exit status 3).
class StartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Ctrl-C (or SIGTERM) while waiting for other nodes.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Clock = std::chrono::steady_clock;

struct JobConfig {
  std::string run_id;
  int nnodes = 1;
  int max_restarts = 0;
  int64_t timeout_ms = 60'000;  // the workers' timeout (--timeout, DP_DIST_TIMEOUT, or the 60 s default)
  bool timeout_given = false;   // for messages: "--timeout 30" or "the default 60 s"
};

struct Layout {
  int world_size = 0;
  int base_rank = 0;       // this node's first rank
  std::vector<int> nproc;  // per node
  std::vector<std::string> hosts;
};

struct RemoteFailure {
  int node = -1;
  std::string line;
  bool consequence = false;  // a PeerLostError: some other failure came first
  bool timed_out = false;    // a timeout: a cut network or a lost node, when one is known, came first
};

// How the nodes ended an attempt.
struct AttemptEnd {
  std::vector<int> failed_nodes;  // nodes whose workers failed
  std::vector<int> lost_nodes;    // nodes whose dp-run stopped answering
  std::optional<std::string> store_lost;
  bool ok() const { return failed_nodes.empty() && lost_nodes.empty() && !store_lost; }
};

class NodeCoordinator {
 public:
  // Connects to host:port with the job's token, retrying until `deadline` (the store's host may
  // start later). `job_timeout`: how long a network cut is ridden out.
  NodeCoordinator(const std::string& host, int port, const std::string& token, int node_rank, int nnodes, Clock::time_point deadline,
                  std::chrono::milliseconds job_timeout);
  ~NodeCoordinator();
  NodeCoordinator(const NodeCoordinator&) = delete;
  NodeCoordinator& operator=(const NodeCoordinator&) = delete;

  // Node 0 publishes `mine`; the others read node 0's and refuse (StartError) another --nnodes or
  // --timeout, naming both values and nodes, and telling every node through "mismatch".
  JobConfig agree_config(const JobConfig& mine, Clock::time_point deadline);
  // Waits for every node to join attempt `attempt`; StartError names the nodes that did not.
  Layout join(int attempt, int nproc_local, Clock::time_point deadline);

  // The watcher of attempt `attempt` (from after join until finish_attempt).
  void start_watch(int attempt);
  // The supervisor's first local failure: becomes the job's first failure unless another node's came first.
  void report_failure(const std::string& line, bool consequence);
  // Another node's failure, once the watcher has seen it.
  std::optional<RemoteFailure> remote_failure() const;
  // Why the store cannot be reached any more (node 0's dp-run gone, the network cut).
  std::optional<std::string> store_lost() const;
  // Nodes whose heartbeat stood still longer than the job's timeout (node 0's watcher), by number.
  std::vector<int> silent_nodes() const;

  // This node's workers are gone (ok: all exited 0; `own_first`: this node's first failure).
  // Waits until every node is done, a failure
  // elsewhere is known and `failure_wait` passed, or a node stops answering (its heartbeat stands
  // still for `node_timeout`); throws Interrupted on Ctrl-C.
  AttemptEnd finish_attempt(bool ok, const std::optional<RemoteFailure>& own_first, std::chrono::milliseconds failure_wait,
                            std::chrono::milliseconds node_timeout);
  // The job's first failure in the attempt: of the nodes' own first failures, one that is not a
  // consequence, the earliest reported first (after finish_attempt; before, the failure key's).
  std::optional<RemoteFailure> first_failure() const;
  // Node 0, before closing the store: waits (at most `wait`) until the other nodes have seen the end.
  void farewell(std::chrono::milliseconds wait);

 private:
  std::string key(const std::string& k) const { return "dp-run/" + run_id_ + "/" + k; }
  std::string akey(const std::string& k) const { return "dp-run/" + run_id_ + "/a" + std::to_string(attempt_) + "/" + k; }
  void watch_loop();
  void check_heartbeats(dp::distributed::TCPStore& store, int tick);
  std::optional<RemoteFailure> read_failure(dp::distributed::TCPStore& store, const std::string& k);
  void check_mismatch();
  void stop_watch();
  static void poll_sleep();

  std::string where_;
  int node_rank_;
  int nnodes_;
  std::chrono::milliseconds job_timeout_;
  std::string run_id_ = "-";
  int attempt_ = 0;
  std::unique_ptr<dp::distributed::TCPStore> main_;   // the main thread's connection
  std::unique_ptr<dp::distributed::TCPStore> watch_;  // the watcher's

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::optional<RemoteFailure> pending_failure_;
  bool pending_done_ = false;
  bool done_ok_ = false;
  bool done_written_ = false;
  std::optional<RemoteFailure> remote_;
  std::optional<RemoteFailure> first_;
  std::optional<std::string> lost_;
  // Per node: the last heartbeat value seen and when it changed (node 0's watcher, then finish_attempt).
  std::vector<std::pair<std::string, Clock::time_point>> beats_;
  std::vector<int> silent_;
  int64_t heartbeat_ = 0;
  std::thread watcher_;
};

}  // namespace dp::run
