#include "job.h"

#include <stdlib.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
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

std::string node_text(const Layout& l, size_t n) {
  return "node " + std::to_string(n) + " (host " + (n < l.hosts.size() ? l.hosts[n] : "?") + ", pid " +
         (n < l.pids.size() ? std::to_string(l.pids[n]) : "?") + ")";
}

// Elastic: the nodes of attempt `now` against the last attempt's: who left and why, who came.
std::string membership_report(const Layout& before, const AttemptEnd& end, const Layout& now) {
  const std::string continuing =
      std::to_string(now.nproc.size()) + " node" + (now.nproc.size() == 1 ? "" : "s") + ", world size " + std::to_string(now.world_size);
  if (before.ids.empty())
    return now.attempt == 0
               ? "node " + std::to_string(now.node_rank) + " of " + continuing
               : "admitted at restart " + std::to_string(now.attempt) + " as node " + std::to_string(now.node_rank) + " of " + continuing;
  std::string parts;
  for (size_t n = 0; n < before.ids.size(); ++n) {
    if (std::find(now.ids.begin(), now.ids.end(), before.ids[n]) != now.ids.end()) continue;
    std::string why = "left: it did not rejoin";
    const auto lost = std::find(end.lost_nodes.begin(), end.lost_nodes.end(), static_cast<int>(n));
    if (lost != end.lost_nodes.end()) {
      const size_t i = static_cast<size_t>(lost - end.lost_nodes.begin());
      why = "lost: heartbeat silent " + (i < end.lost_silent_s.size() ? seconds_text(end.lost_silent_s[i]) : std::string("?")) + " s";
    } else if (std::count(end.failed_nodes.begin(), end.failed_nodes.end(), static_cast<int>(n))) {
      why = "left: it failed (its workers, or its dp-run was stopped) and did not rejoin";
    }
    parts += (parts.empty() ? "" : "; ") + node_text(before, n) + " " + why;
  }
  for (size_t n = 0; n < now.ids.size(); ++n)
    if (std::find(before.ids.begin(), before.ids.end(), now.ids[n]) == before.ids.end())
      parts += (parts.empty() ? "" : "; ") + node_text(now, n) + " admitted at restart " + std::to_string(now.attempt);
  return "attempt " + std::to_string(before.attempt) + ": " + (parts.empty() ? "the same nodes" : parts) + "; continuing with " + continuing +
         " (restart " + std::to_string(now.attempt) + ")";
}

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
  config.nnodes_min = o.nnodes_min;
  config.node_timeout_ms = o.node_timeout_s ? static_cast<int64_t>(*o.node_timeout_s * 1000) : 0;
  config.last_call_ms = static_cast<int64_t>(o.last_call_s * 1000);
  const bool elastic = o.elastic();
  std::unique_ptr<NodeCoordinator> nodes;
  const auto rdzv = milliseconds(static_cast<int64_t>(o.rdzv_timeout_s * 1000));
  if (o.multi_node()) {
    try {
      nodes = std::make_unique<NodeCoordinator>(master, port, token, o.node_rank, o.nnodes, Clock::now() + rdzv, timeout);
      config = nodes->agree_config(config, Clock::now() + rdzv);
      // Node 0's --node-timeout is the job's.
      if (config.node_timeout_ms > 0) nodes->set_node_timeout(milliseconds(config.node_timeout_ms));
      if (elastic) nodes->enter_elastic(config);
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
    const std::string where = elastic ? std::string(o.node_rank == 0 ? "node 0" : "joining") + " (elastic, --nnodes " + std::to_string(o.nnodes_min) +
                                            ":" + std::to_string(o.nnodes) + ")"
                                      : "node " + std::to_string(o.node_rank) + " of " + std::to_string(o.nnodes);
    say("run " + config.run_id + ": " + where + ", " + plural(static_cast<size_t>(o.nproc_per_node), "worker") + ", store " + master + ":" +
        std::to_string(port) + (server ? " (hosted here)" : " (node 0's)") + ", " + cpu);
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

  // Elastic: node 0 ends the job for the nodes still waiting (they leave with its status).
  auto close_job = [&](int status, const std::string& reason) {
    if (nodes && elastic) nodes->close_job(status, reason);
  };
  Layout previous;          // elastic: the last attempt's nodes
  AttemptEnd previous_end;  // and how it ended here
  int restarts_used = 0;    // elastic: failed attempts restarted (membership changes are not counted)
  for (int attempt = 0;; ++attempt) {
    Layout layout;
    if (nodes && elastic) {
      std::vector<int> expect;  // the last attempt's nodes not lost: node 0 waits for them, not for --last-call
      for (size_t n = 0; n < previous.ids.size(); ++n)
        if (std::find(previous_end.lost_nodes.begin(), previous_end.lost_nodes.end(), static_cast<int>(n)) == previous_end.lost_nodes.end())
          expect.push_back(previous.ids[n]);
      try {
        layout = nodes->elastic_join(attempt, o.nproc_per_node, restarts_used, expect, Clock::now() + rdzv);
      } catch (const Interrupted&) {
        const int status = interrupted_status(stop_signal());
        close_job(status, "node 0's dp-run was stopped by " + signal_name(stop_signal()));
        merge_timeline();
        return status;
      } catch (const JobClosed& c) {
        say(std::string(previous.ids.empty() ? "the job ended before this node was admitted" : "node 0 ended the job") + ": " + c.what());
        nodes->farewell(kFarewell);
        merge_timeline();
        return c.status;
      } catch (const StartError& e) {
        say(e.what());
        merge_timeline();
        return kExitCannotStart;
      }
      attempt = layout.attempt;
      restarts_used = layout.restarts_used;
      if (!o.quiet || !previous.ids.empty()) say(membership_report(previous, previous_end, layout));
    } else if (nodes) {
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
    const int my_node = nodes && elastic ? layout.node_rank : o.node_rank;
    env.node_rank = my_node;
    env.nnodes = nodes ? static_cast<int>(layout.nproc.size()) : 1;
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
    spec.node_rank = my_node;
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
        timeline_parts.push_back({w.timeline_file, w.rank, my_node});
      }
      spec.workers.push_back({w.rank, local, worker_environment(inherited, env, w), w.error_file});
    }

    if (nodes) nodes->start_watch(attempt);
    AttemptResult result = run_attempt(spec);
    if (result.outcome == Outcome::kCannotStart) {
      say(result.start_error);
      if (nodes) {
        const std::string line = "node " + std::to_string(my_node) + " could not start its workers: " + result.start_error;
        nodes->report_failure(line, false);
        try {
          nodes->finish_attempt(false, RemoteFailure{my_node, line, false}, failure_wait(o.grace_s), kNodeTimeout);
        } catch (const Interrupted&) {
        }
        close_job(kExitCannotStart, line);
      }
      merge_timeline();
      return kExitCannotStart;
    }

    AttemptEnd end;
    if (nodes) {
      try {
        std::optional<RemoteFailure> own;
        if (result.first_failure)
          own = RemoteFailure{my_node, describe(*result.first_failure), is_consequence(*result.first_failure), is_timeout(*result.first_failure)};
        end = nodes->finish_attempt(result.outcome == Outcome::kSucceeded, own, failure_wait(o.grace_s), kNodeTimeout);
      } catch (const Interrupted&) {
        merge_timeline();
        const int sig = result.signal ? result.signal : stop_signal();
        close_job(kExitSignalBase + sig, "node 0's dp-run was stopped by " + signal_name(sig));
        return interrupted_status(sig);
      }
      if (end.store_lost && !result.store_lost) say("lost the store (node 0's dp-run): " + *end.store_lost);
      if (!elastic)
        for (int n : end.lost_nodes)
          say("node " + std::to_string(n) + "'s dp-run did not finish the attempt (no answer); its workers' fate is unknown");
    }

    if (result.outcome == Outcome::kInterrupted) {
      merge_timeline();
      close_job(kExitSignalBase + result.signal, "node 0's dp-run was stopped by " + signal_name(result.signal));
      return interrupted_status(result.signal);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (result.outcome == Outcome::kSucceeded && end.ok()) {
      close_job(kExitOk, "the job finished: every worker exited with status 0");
      if (nodes) nodes->farewell(kFarewell);
      merge_timeline();
      if (!o.quiet)
        say("all " + plural(static_cast<size_t>(layout.world_size), "worker") + (o.multi_node() ? " on " + plural(layout.nproc.size(), "node") : "") +
            " exited with status 0 (" + seconds_text(seconds) + " s" + (attempt > 0 ? ", " + plural(static_cast<size_t>(attempt), "restart") : "") +
            ")");
      return kExitOk;
    }

    // The job's first failure: the store's word with several nodes, else this node's. A network cut
    // (this node lost the store, or node 0 lost a node) comes before what it causes: timeouts and
    // lost peers in the workers, and workers stopped because of it.
    std::string first;
    bool first_is_weak = false;  // a timeout or a consequence: a known cut is named instead
    if (nodes) {
      if (auto f = nodes->first_failure()) {
        first =
            (f->node != my_node && f->line.rfind("its dp-run stopped answering", 0) == 0 ? "node " + std::to_string(f->node) + ": " : "") + f->line;
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

    if (nodes && elastic) {
      previous = layout;
      previous_end = end;
      if (lost) {
        // Node 0's dp-run hosts the store: without it no node can meet the others again.
        say("the job ends: node 0's dp-run (" + nodes->node0_identity() + "), which hosts the store at " + master + ":" + std::to_string(port) +
            ", is lost (" + *lost + "); an elastic job continues without any other node, never without node 0");
        merge_timeline();
        return kExitWorkerFailed;
      }
      const auto f = nodes->first_failure();
      if (my_node != 0) {
        say("attempt " + std::to_string(attempt) + " ended (" + (f && f->membership ? "membership change: " : "first failure: ") + first +
            "); rejoining: node 0 restarts the job or ends it");
        continue;
      }
      if (f && f->membership) {
        say("attempt " + std::to_string(attempt) + " ended for a membership change: " + first);
        continue;
      }
      if (restarts_used < config.max_restarts) {
        ++restarts_used;
        say("attempt " + std::to_string(attempt) + " failed (first failure: " + first + "); restarting with the nodes that rejoin (restart " +
            std::to_string(restarts_used) + " of " + std::to_string(config.max_restarts) + " for failures)");
        continue;
      }
      const std::string why = "job failed (exit status " + std::to_string(kExitWorkerFailed) + ") after " +
                              plural(static_cast<size_t>(restarts_used), "restart") + " for failures; first failure: " + first;
      close_job(kExitWorkerFailed, why);
      nodes->farewell(kFarewell);
      merge_timeline();
      say(why);
      return kExitWorkerFailed;
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
