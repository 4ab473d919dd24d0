#include "supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <algorithm>
#include <cerrno>
#include "process.h"
#include "signals.h"

namespace dp::run {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kPollEvery{50};      // at the latest; SIGCHLD wakes the loop at once
constexpr milliseconds kAfterKill{10'000};  // how long a SIGKILLed worker may take to be reaped

struct Running {
  const WorkerSpec* spec;
  pid_t pid = 0;
  Clock::time_point started;
  bool exited = false;
  int stop_signal = 0;
  WorkerExit exit;
};

enum class Phase { kRunning, kSettling, kTerminating };

std::string pid_list(const std::vector<Running>& ws) {
  std::string out;
  for (const auto& w : ws) out += (out.empty() ? "" : ", ") + std::to_string(w.pid);
  return out;
}

std::string rank_range(const std::vector<Running>& ws) {
  if (ws.empty()) return "none";
  const int lo = ws.front().spec->rank, hi = ws.back().spec->rank;
  return lo == hi ? "rank " + std::to_string(lo) : "ranks " + std::to_string(lo) + "-" + std::to_string(hi);
}

}  // namespace

AttemptResult run_attempt(const AttemptSpec& spec) {
  AttemptResult result;
  std::vector<Running> ws;
  ws.reserve(spec.workers.size());
  for (const WorkerSpec& w : spec.workers) {
    Running r;
    r.spec = &w;
    try {
      r.pid = spawn_process(spec.program, spec.argv, w.env);
    } catch (const std::exception& e) {
      // The program cannot run: those already started are killed and reaped; nothing is left.
      for (Running& s : ws) signal_group(s.pid, SIGKILL);
      for (Running& s : ws) {
        int status = 0;
        while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
        }
      }
      result.outcome = Outcome::kCannotStart;
      result.start_error = e.what();
      return result;
    }
    r.started = Clock::now();
    r.exit.rank = w.rank;
    r.exit.node = spec.node_rank;
    r.exit.local_rank = w.local_rank;
    r.exit.pid = r.pid;
    ws.push_back(r);
  }
  if (!spec.quiet)
    say("node " + std::to_string(spec.node_rank) + ": started " + rank_range(ws) + " of " + std::to_string(spec.world_size) + " (pids " +
        pid_list(ws) + ")" + (spec.attempt > 0 ? ", restart " + std::to_string(spec.attempt) : ""));

  Phase phase = Phase::kRunning;
  Clock::time_point settle_until{}, kill_at{}, give_up_at{};
  bool killed = false;
  int signals_seen = stop_signal_count();
  size_t live = ws.size();
  std::vector<WorkerExit> failures;  // workers that failed by themselves (not stopped by dp-run), in order
  const auto grace = milliseconds(static_cast<int64_t>(spec.grace_s * 1000));

  auto stop_all = [&](int sig) {
    for (Running& w : ws) {
      if (w.exited) continue;
      signal_group(w.pid, sig);
      if (sig != SIGKILL) signal_group(w.pid, SIGCONT);  // a stopped worker must run to see it
      if (w.stop_signal == 0) w.stop_signal = sig;
    }
  };
  auto begin_stop = [&](Clock::time_point now) {
    phase = Phase::kSettling;
    settle_until = now + kSettle;
  };

  while (live > 0) {
    // Collect every exit so far; report this batch's failures, causes before consequences.
    std::vector<WorkerExit> batch;
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = std::find_if(ws.begin(), ws.end(), [&](const Running& w) { return w.pid == pid && !w.exited; });
      if (it == ws.end()) continue;
      Running& w = *it;
      w.exited = true;
      --live;
      w.exit.seconds = std::chrono::duration<double>(Clock::now() - w.started).count();
      w.exit.wait_status = status;
      w.exit.stop_signal = w.stop_signal;
      w.exit.error = dp::distributed::read_error_file(w.spec->error_file);
      if (!failed(w.exit)) continue;
      batch.push_back(w.exit);
      if (w.stop_signal == 0) failures.push_back(w.exit);
    }
    std::stable_sort(batch.begin(), batch.end(), [](const WorkerExit& a, const WorkerExit& b) { return !is_consequence(a) && is_consequence(b); });
    for (const WorkerExit& e : batch) say(describe(e));
    if (!batch.empty() && phase == Phase::kRunning && result.signal == 0) {
      if (spec.nodes) spec.nodes->report_failure(describe(batch.front()), is_consequence(batch.front()));
      begin_stop(Clock::now());
    }
    if (live == 0) break;
    const auto now = Clock::now();

    // Signals to dp-run: passed on at once; a second one kills.
    if (const int count = stop_signal_count(); count != signals_seen) {
      signals_seen = count;
      const int sig = stop_signal();
      if (result.signal == 0) {
        result.signal = sig;
        // A closed terminal or SSH session (SIGHUP) stops the job as SIGTERM does: the workers get
        // SIGTERM, which programs (dp-train, torchrun's) take as "checkpoint and exit".
        const int pass = sig == SIGHUP ? SIGTERM : sig;
        say("got " + signal_name(sig) + ": passing " + (pass == sig ? std::string("it") : signal_name(pass)) + " to the " + std::to_string(live) +
            " running worker" + (live == 1 ? "" : "s") + " (SIGKILL in " + seconds_text(spec.grace_s) + " s; again to kill now)");
        stop_all(pass);
        phase = Phase::kTerminating;
        kill_at = now + grace;
        // The other nodes stop too (their workers would only lose their peers).
        if (spec.nodes && !result.remote)
          spec.nodes->report_failure("node " + std::to_string(spec.node_rank) + "'s dp-run got " + signal_name(sig), false);
      } else if (!killed) {
        say("got " + signal_name(sig) + " again: killing the workers");
        kill_at = now;
      }
    }

    // Another node failed, or the store is gone: stop as for a failure here.
    if (phase == Phase::kRunning && spec.nodes) {
      if (auto remote = spec.nodes->remote_failure()) {
        if (remote->membership)
          say("membership change: " + remote->line + "; stopping this node's workers");
        else
          say("node " + std::to_string(remote->node) + " failed: " + remote->line + "; stopping this node's workers");
        result.remote = remote;
        begin_stop(now);
      } else if (auto lost = spec.nodes->store_lost()) {
        say("lost the store (node 0's dp-run): " + *lost + "; stopping this node's workers");
        result.store_lost = lost;
        begin_stop(now);
      }
    }

    if (phase == Phase::kSettling && now >= settle_until) {
      stop_all(SIGTERM);
      phase = Phase::kTerminating;
      kill_at = now + grace;
    }
    if (phase == Phase::kTerminating && !killed && now >= kill_at) {
      stop_all(SIGKILL);
      killed = true;
      give_up_at = now + kAfterKill;
    }
    if (killed && now >= give_up_at) {
      for (const Running& w : ws)
        if (!w.exited)
          say("rank " + std::to_string(w.spec->rank) + " (pid " + std::to_string(w.pid) + ") did not exit 10 s after SIGKILL; leaving it");
      break;
    }

    // Sleep until the next deadline, a signal, or a child's exit.
    auto next = now + kPollEvery;
    if (phase == Phase::kSettling) next = std::min(next, settle_until);
    if (phase == Phase::kTerminating && !killed) next = std::min(next, kill_at);
    wait_for_signal_or(static_cast<int>(std::max<int64_t>(0, std::chrono::duration_cast<milliseconds>(next - now).count())));
  }

  for (const Running& w : ws) result.exits.push_back(w.exit);
  if (const size_t first = pick_first_failure(failures); first != std::string::npos) result.first_failure = failures[first];
  if (result.signal != 0) {
    result.outcome = Outcome::kInterrupted;
  } else if (!failures.empty() || result.remote || result.store_lost || live > 0 ||
             std::any_of(result.exits.begin(), result.exits.end(), [](const WorkerExit& e) { return failed(e); })) {
    result.outcome = Outcome::kFailed;
  } else {
    result.outcome = Outcome::kSucceeded;
  }
  return result;
}

}  // namespace dp::run
