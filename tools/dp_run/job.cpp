#include "job.h"

#include <stdlib.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include "dp/distributed/errors.h"
#include "dp/distributed/store.h"
#include "exit_codes.h"
#include "nodes.h"
#include "process.h"
#include "report.h"
#include "signals.h"
#include "supervisor.h"
#include "timeline_merge.h"
#include "worker_env.h"

namespace dp::run {
namespace {

using std::chrono::milliseconds;

// After a failure, how long a node waits for the others to be done (they settle, then stop their
// workers within the grace period); and how long a silent node may go without a heartbeat.
milliseconds failure_wait(double grace_s) { return kSettle + milliseconds(static_cast<int64_t>(grace_s * 1000)) + milliseconds(5000); }
constexpr milliseconds kNodeTimeout{15'000};
constexpr milliseconds kFarewell{2000};
constexpr milliseconds kDefaultTimeout{60'000};  // the library's (Store::kDefaultTimeout, DP_DIST_TIMEOUT unset)

std::string generated_run_id() { return dp::distributed::generate_store_token().substr(0, 12); }

// The workers' timeout: --timeout, else DP_DIST_TIMEOUT inherited from dp-run's environment, else
// the library's 60 s. The store's waits, and how long a network cut is ridden out, follow it.
milliseconds job_timeout(const Options& o, const std::vector<std::string>& inherited, bool* given) {
  *given = o.timeout_s.has_value();
  if (o.timeout_s) return milliseconds(static_cast<int64_t>(*o.timeout_s * 1000));
  if (auto v = env_value(inherited, "DP_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double s = std::strtod(v->c_str(), &end);
    if (end != v->c_str() && *end == '\0' && std::isfinite(s) && s >= 0.001 && s <= 1e7) {
      *given = true;
      return milliseconds(static_cast<int64_t>(s * 1000));
    }
  }
  return kDefaultTimeout;
}

// The job's token: --token-file, else DP_STORE_TOKEN, else (one node) a new one. Empty and *error
// set when it cannot be had.
std::string job_token(const Options& o, const std::vector<std::string>& inherited, std::string* error) {
  try {
    if (!o.token_file.empty()) return dp::distributed::read_store_token_file(o.token_file);
    if (auto v = env_value(inherited, "DP_STORE_TOKEN"); v && !v->empty()) {
      dp::distributed::check_store_token(*v, "DP_STORE_TOKEN");
      return *v;
    }
    return dp::distributed::generate_store_token();
  } catch (const std::exception& e) {
    *error = e.what();
    return {};
  }
}

// The job's scratch directory (error files, timeline parts), removed at the end.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/dp-run-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("cannot make a directory for the error files: " + tmpl + ": " + std::strerror(errno));
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

int interrupted_status(int sig) {
  say("stopped by " + signal_name(sig) + " (exit status " + std::to_string(kExitSignalBase + sig) + ")");
  return kExitSignalBase + sig;
}

std::string plural(size_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

int run_job(const Options& o) {
  install_signal_handlers();
  const auto started = Clock::now();
  const std::vector<std::string> inherited = current_environment();

  std::string program;
  try {
    program = resolve_program(o.command.front(), env_value(inherited, "PATH").value_or("/usr/local/bin:/usr/bin:/bin"));
  } catch (const std::exception& e) {
    say(e.what());
    return kExitCannotStart;
  }
  std::unique_ptr<ScratchDir> scratch;
  try {
    scratch = std::make_unique<ScratchDir>();
  } catch (const std::exception& e) {
    say(e.what());
    return kExitCannotStart;
  }

  // The job's token: every client of the store proves it holds it; the workers get it in their
  // environment only (never on a command line, never printed, never in the store).
  std::string token_error;
  const std::string token = job_token(o, inherited, &token_error);
  if (token.empty()) {
    say(token_error);
    return kExitBadArguments;
  }
  bool timeout_given = false;
  const milliseconds timeout = job_timeout(o, inherited, &timeout_given);

  // The store: this dp-run hosts it with one node (127.0.0.1, a free port unless one was given)
  // and as node 0 of several (on --master-addr, --master-port), listening on that address only
  // unless --store-bind names another.
  const std::string master = o.master();
  std::unique_ptr<dp::distributed::TCPStoreServer> server;
  int port = o.master_port;
  if (!o.multi_node() || o.node_rank == 0) {
    const std::string listen = o.store_bind.empty() ? master : o.store_bind;
    const int want = port > 0 ? port : 0;
    try {
      dp::distributed::TCPStoreServerOptions so = o.store_limits;
      so.token = token;
      so.max_wait = timeout + milliseconds(10'000);  // a parked wait never outlives the workers' timeout
      so.log = [](const std::string& line) { say("store: " + line); };
      const SignalsBlocked blocked;  // the server's thread inherits the mask: signals go to the main thread
      server = std::make_unique<dp::distributed::TCPStoreServer>(listen, static_cast<uint16_t>(want), std::move(so));
      port = server->port();
    } catch (const std::exception& e) {
      // The server's message names the address again: keep its reason.
      std::string why = e.what();
      if (const size_t at = why.find("): "); why.rfind("TCPStoreServer: cannot listen on ", 0) == 0 && at != std::string::npos)
        why = why.substr(at + 3);
      say("cannot host the store on " + listen + ":" + std::to_string(want) + ": " + why);
      return kExitCannotStart;
    }
  }

  JobConfig config{o.run_id.empty() ? generated_run_id() : o.run_id, o.nnodes, o.max_restarts, timeout.count(), timeout_given};
  std::unique_ptr<NodeCoordinator> nodes;
  const auto rdzv = milliseconds(static_cast<int64_t>(o.rdzv_timeout_s * 1000));
  if (o.multi_node()) {
    try {
      nodes = std::make_unique<NodeCoordinator>(master, port, token, o.node_rank, o.nnodes, Clock::now() + rdzv, timeout);
      config = nodes->agree_config(config, Clock::now() + rdzv);
    } catch (const Interrupted&) {
      return interrupted_status(stop_signal());
    } catch (const StartError& e) {
      say(e.what());
      return kExitCannotStart;
    }
  }

  const int cores = available_cores();
  const int share = cpu_share(cores, o.nproc_per_node);
  if (!o.quiet) {
    std::string cpu;
    for (const char* name : {"DP_CPU_DEVICES", "OPENBLAS_NUM_THREADS"})
      cpu += std::string(cpu.empty() ? "" : ", ") + name + "=" +
             env_value(inherited, name).value_or(std::to_string(share) + " (of " + std::to_string(cores) + " cores)");
    say("run " + config.run_id + ": node " + std::to_string(o.node_rank) + " of " + std::to_string(o.nnodes) + ", " +
        plural(static_cast<size_t>(o.nproc_per_node), "worker") + ", store " + master + ":" + std::to_string(port) +
        (server ? " (hosted here)" : " (node 0's)") + ", " + cpu);
  }

  std::vector<TimelinePart> timeline_parts;
  auto merge_timeline = [&]() {
    if (o.timeline.empty()) return;
    try {
      const MergeResult m = merge_timelines(timeline_parts, o.timeline);
      if (!o.quiet || !m.ranks_without.empty()) {
        std::string without;
        for (int r : m.ranks_without) without += (without.empty() ? "" : ", ") + std::to_string(r);
        say("timeline: " + std::to_string(m.events) + " events written to " + o.timeline +
            (m.dropped ? " (" + std::to_string(m.dropped) + " incomplete lines left out)" : "") +
            (without.empty() ? "" : "; no events from rank(s) " + without + " (programs built on dparallel record them)"));
      }
    } catch (const std::exception& e) {
      say(e.what());
    }
  };

  for (int attempt = 0;; ++attempt) {
    Layout layout;
    if (nodes) {
      try {
        layout = nodes->join(attempt, o.nproc_per_node, Clock::now() + rdzv);
      } catch (const Interrupted&) {
        merge_timeline();
        return interrupted_status(stop_signal());
      } catch (const StartError& e) {
        say(e.what());
        merge_timeline();
        return kExitCannotStart;
      }
    } else {
      layout.world_size = o.nproc_per_node;
      layout.nproc = {o.nproc_per_node};
    }

    AttemptEnv env;
    env.world_size = layout.world_size;
    env.nproc_local = o.nproc_per_node;
    env.node_rank = o.node_rank;
    env.nnodes = o.nnodes;
    env.master_addr = master;
    env.master_port = port;
    env.run_id = config.run_id;
    env.restart_count = attempt;
    env.max_restarts = config.max_restarts;
    env.store_prefix = config.run_id + "/attempt" + std::to_string(attempt);
    env.timeout_s = o.timeout_s;
    env.cpu_share = share;
    env.store_token = token;

    AttemptSpec spec;
    spec.program = program;
    spec.argv = o.command;
    spec.node_rank = o.node_rank;
    spec.world_size = layout.world_size;
    spec.attempt = attempt;
    spec.grace_s = o.grace_s;
    spec.quiet = o.quiet;
    spec.nodes = nodes.get();
    for (int local = 0; local < o.nproc_per_node; ++local) {
      WorkerEnv w;
      w.rank = layout.base_rank + local;
      w.local_rank = local;
      const std::string tag = "attempt" + std::to_string(attempt) + ".rank" + std::to_string(w.rank);
      w.error_file = scratch->file("error." + tag + ".json");
      if (!o.timeline.empty()) {
        w.timeline_file = scratch->file("timeline." + tag + ".json");
        timeline_parts.push_back({w.timeline_file, w.rank, o.node_rank});
      }
      spec.workers.push_back({w.rank, local, worker_environment(inherited, env, w), w.error_file});
    }

    if (nodes) nodes->start_watch(attempt);
    AttemptResult result = run_attempt(spec);
    if (result.outcome == Outcome::kCannotStart) {
      say(result.start_error);
      if (nodes) {
        const std::string line = "node " + std::to_string(o.node_rank) + " could not start its workers: " + result.start_error;
        nodes->report_failure(line, false);
        try {
          nodes->finish_attempt(false, RemoteFailure{o.node_rank, line, false}, failure_wait(o.grace_s), kNodeTimeout);
        } catch (const Interrupted&) {
        }
      }
      merge_timeline();
      return kExitCannotStart;
    }

    AttemptEnd end;
    if (nodes) {
      try {
        std::optional<RemoteFailure> own;
        if (result.first_failure)
          own = RemoteFailure{o.node_rank, describe(*result.first_failure), is_consequence(*result.first_failure), is_timeout(*result.first_failure)};
        end = nodes->finish_attempt(result.outcome == Outcome::kSucceeded, own, failure_wait(o.grace_s), kNodeTimeout);
      } catch (const Interrupted&) {
        merge_timeline();
        return interrupted_status(result.signal ? result.signal : stop_signal());
      }
      if (end.store_lost && !result.store_lost) say("lost the store (node 0's dp-run): " + *end.store_lost);
      for (int n : end.lost_nodes)
        say("node " + std::to_string(n) + "'s dp-run did not finish the attempt (no answer); its workers' fate is unknown");
    }

    if (result.outcome == Outcome::kInterrupted) {
      merge_timeline();
      return interrupted_status(result.signal);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (result.outcome == Outcome::kSucceeded && end.ok()) {
      if (nodes) nodes->farewell(kFarewell);
      merge_timeline();
      if (!o.quiet)
        say("all " + plural(static_cast<size_t>(layout.world_size), "worker") +
            (o.multi_node() ? " on " + plural(static_cast<size_t>(o.nnodes), "node") : "") + " exited with status 0 (" + seconds_text(seconds) +
            " s" + (attempt > 0 ? ", " + plural(static_cast<size_t>(attempt), "restart") : "") + ")");
      return kExitOk;
    }

    // The job's first failure: the store's word with several nodes, else this node's. A network cut
    // (this node lost the store, or node 0 lost a node) comes before what it causes: timeouts and
    // lost peers in the workers, and workers stopped because of it.
    std::string first;
    bool first_is_weak = false;  // a timeout or a consequence: a known cut is named instead
    if (nodes) {
      if (auto f = nodes->first_failure()) {
        first = (f->node != o.node_rank && f->line.rfind("its dp-run stopped answering", 0) == 0 ? "node " + std::to_string(f->node) + ": " : "") +
                f->line;
        first_is_weak = f->consequence || f->timed_out;
      }
    }
    if (first.empty() && result.first_failure) {
      first = describe(*result.first_failure);
      first_is_weak = is_consequence(*result.first_failure) || is_timeout(*result.first_failure);
    }
    if (first.empty() && result.remote) first = result.remote->line;
    if (first.empty() && !end.failed_nodes.empty()) first = "on node " + std::to_string(end.failed_nodes.front());
    const std::optional<std::string> lost = result.store_lost ? result.store_lost : end.store_lost;
    std::vector<int> gone = end.lost_nodes;
    if (nodes)
      for (int n : nodes->silent_nodes())
        if (std::find(gone.begin(), gone.end(), n) == gone.end()) gone.push_back(n);
    if ((first.empty() || first_is_weak) && lost) {
      first = "this node lost the store at " + master + ":" + std::to_string(port) + ": " + *lost + (first.empty() ? "" : "; then " + first);
    } else if ((first.empty() || first_is_weak) && !gone.empty()) {
      first = "node " + std::to_string(gone.front()) + "'s dp-run stopped answering (the network to it is cut, or its machine is down)" +
              (first.empty() ? "" : "; then " + first);
    }

    const bool can_restart = attempt < config.max_restarts && !result.store_lost && !end.store_lost && end.lost_nodes.empty();
    if (can_restart) {
      say("attempt " + std::to_string(attempt) + " failed (first failure: " + first + "); restarting every worker (restart " +
          std::to_string(attempt + 1) + " of " + std::to_string(config.max_restarts) + ")");
      continue;
    }
    if (nodes) nodes->farewell(kFarewell);
    merge_timeline();
    say("job failed (exit status " + std::to_string(kExitWorkerFailed) + ")" +
        (config.max_restarts > 0 ? " after " + plural(static_cast<size_t>(attempt), "restart") : "") + "; first failure: " + first);
    return kExitWorkerFailed;
  }
}

}  // namespace dp::run
