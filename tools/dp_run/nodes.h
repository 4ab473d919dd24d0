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
// Elastic jobs (--nnodes MIN:MAX) add, the node numbers of an attempt being assigned at its
// rendezvous (node 0, the store's host, first, then the others in the order they first came):
//   <run>/ids                   a counter: each dp-run's id (node 0's is 0), in the order they came
//   <run>/r<A>/want/id<I>       {"nproc", "host", "pid"}: dp-run I wants to be in attempt A
//   <run>/r<A>/members          {"ids", "nodes", "restarts_used"}: node 0's choice for attempt A
//   <run>/closed                {"status", "reason"}: node 0 ended the job (the waiting nodes leave)
//   <run>/left/id<I>            dp-run I read "closed" (node 0 waits up to 2 s for the waiting ones)
//   <run>/hb/id<I>              the heartbeat of dp-run I (while it joins, runs and finishes)
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
// Elastic: node 0 ended the job while this node waited to be admitted (or to rejoin); exit with `status`.
class JobClosed : public std::runtime_error {
 public:
  JobClosed(const std::string& what, int status) : std::runtime_error(what), status(status) {}
  int status;
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
  int nnodes_min = 0;           // elastic: MIN (nnodes is MAX); 0 or nnodes: a fixed number of nodes
  int64_t node_timeout_ms = 0;  // a node silent this long is lost (0: the job's timeout + 2 s, at least 15 s)
  int64_t last_call_ms = 3000;  // elastic: node 0's wait for more nodes once MIN joined
  bool elastic() const { return nnodes_min > 0 && nnodes_min < nnodes; }
};

struct Layout {
  int world_size = 0;
  int base_rank = 0;       // this node's first rank
  std::vector<int> nproc;  // per node
  std::vector<std::string> hosts;
  // Elastic: the attempt this node was admitted to, its node number there, each node's dp-run id
  // and pid, and the failed attempts restarted so far (node 0's count).
  int attempt = 0;
  int node_rank = 0;
  std::vector<int> ids;
  std::vector<int64_t> pids;
  int restarts_used = 0;
};

struct RemoteFailure {
  int node = -1;
  std::string line;
  bool consequence = false;  // a PeerLostError: some other failure came first
  bool timed_out = false;    // a timeout: a cut network or a lost node, when one is known, came first
  bool membership = false;   // elastic: not a failure: node 0 restarts the workers to admit a waiting node
};

// How the nodes ended an attempt.
struct AttemptEnd {
  std::vector<int> failed_nodes;      // nodes whose workers failed
  std::vector<int> lost_nodes;        // nodes whose dp-run stopped answering
  std::vector<double> lost_silent_s;  // per lost node: how long its heartbeat had stood still
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

  // --node-timeout (0: the job's timeout + 2 s, and at least finish_attempt's node_timeout).
  void set_node_timeout(std::chrono::milliseconds t) { node_timeout_ = t; }
  // Elastic (after agree_config with an elastic config): this dp-run's id in the job.
  void enter_elastic(const JobConfig& config);
  // Elastic rendezvous of attempt `attempt` (or a later one, for a node not admitted to it). Node 0
  // waits until MIN nodes want it, then until --last-call passed, MAX nodes came or every node of
  // `expect` (ids: the last attempt's nodes that are not lost) came, publishes the members and
  // returns; StartError (and the job closed for the others) when MIN did not come by `deadline`.
  // The others wait until node 0 publishes, rejoining later attempts until admitted; JobClosed when
  // node 0 ended the job, StartError when node 0 stops answering.
  Layout elastic_join(int attempt, int nproc_local, int restarts_used, const std::vector<int>& expect, Clock::time_point deadline);
  // Node 0: ends the job for every node still waiting (status: their exit status).
  void close_job(int status, const std::string& reason);
  // Node 0's dp-run: "host H, pid P" as it joined (elastic; "?" before any rendezvous).
  std::string node0_identity() const;

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
  void check_waiting(dp::distributed::TCPStore& store, int tick);
  std::string hb_key(int node) const;
  void beat(dp::distributed::TCPStore& store);
  std::chrono::milliseconds silent_limit() const;
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
  std::atomic<int64_t> heartbeat_{0};
  Clock::time_point last_beat_{};
  std::thread watcher_;
  // Elastic.
  bool elastic_ = false;
  int min_ = 0;
  int max_nodes_ = 0;  // MAX (nnodes_ is the attempt's node count)
  int id_ = -1;
  std::chrono::milliseconds node_timeout_{0};
  std::chrono::milliseconds last_call_{0};
  std::vector<int> ids_;  // the attempt's nodes' ids, by node number
  std::string node0_ = "?";
};

}  // namespace dp::run
