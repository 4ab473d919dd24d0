#include "report.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include "dp/distributed/errors.h"
#include "process.h"

namespace dp::run {

void say(const std::string& text) {
  const std::string line = "dp-run: " + dp::distributed::printable_text(text, size_t{1} << 20) + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(2, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

bool failed(const WorkerExit& w) { return !(WIFEXITED(w.wait_status) && WEXITSTATUS(w.wait_status) == 0); }

namespace {

// A worker that exited with 128 + SIGINT, SIGTERM or SIGHUP without an error, dp-run having sent it
// nothing: it stopped because a stop signal reached the job elsewhere (dp-train's ranks agree to
// stop together when any one of them gets one).
bool stopped_on_a_signal(const WorkerExit& w) {
  if (w.error || w.stop_signal != 0 || !WIFEXITED(w.wait_status)) return false;
  const int status = WEXITSTATUS(w.wait_status);
  return status == 128 + SIGINT || status == 128 + SIGTERM || status == 128 + SIGHUP;
}

}  // namespace

bool is_consequence(const WorkerExit& w) {
  // A PeerLostError, a write to a connection a dead peer left (for programs that restored SIGPIPE),
  // or a stop the job's ranks agreed on after a signal that came elsewhere.
  return (w.error && w.error->type == "PeerLostError") || (WIFSIGNALED(w.wait_status) && WTERMSIG(w.wait_status) == SIGPIPE) ||
         stopped_on_a_signal(w);
}

bool is_timeout(const WorkerExit& w) {
  return w.error && (w.error->type == "CollectiveTimeout" || w.error->type == "StoreTimeout" || w.error->type == "RendezvousError");
}

size_t pick_first_failure(const std::vector<WorkerExit>& failures) {
  for (size_t i = 0; i < failures.size(); ++i)
    if (!is_consequence(failures[i])) return i;
  return failures.empty() ? std::string::npos : 0;
}

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 255;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s < 0 ? 0.0 : s);
  return buf;
}

std::string one_line(const std::string& text, size_t max_chars) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      if (i + 1 < text.size()) out += " | ";
    } else if (c == '\r' || c == '\t') {
      out += ' ';
    } else {
      out += c;
    }
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars) + " ...";
  return out;
}

std::string describe(const WorkerExit& w) {
  std::string line = "rank " + std::to_string(w.rank) + " (node " + std::to_string(w.node) + ", local " + std::to_string(w.local_rank) + ", pid " +
                     std::to_string(w.pid) + ") ";
  const std::string after = " after " + seconds_text(w.seconds) + " s";
  if (WIFSIGNALED(w.wait_status)) {
    const int sig = WTERMSIG(w.wait_status);
    if (w.stop_signal != 0 && sig == w.stop_signal) {
      line += "was stopped by dp-run (" + signal_name(sig) + ")" + after;
    } else {
      line += "was killed by " + signal_name(sig) + after;
      if (WCOREDUMP(w.wait_status)) line += " (core dumped)";
      if (w.stop_signal != 0) line += " (after dp-run's " + signal_name(w.stop_signal) + ")";
    }
  } else {
    line += "exited with status " + std::to_string(shell_status(w.wait_status)) + after;
    if (w.stop_signal != 0) line += " (after dp-run's " + signal_name(w.stop_signal) + ")";
  }
  if (w.error) {
    line += ": " + dp::distributed::printable_text(w.error->type, 64) + ": " + dp::distributed::printable_text(one_line(w.error->message), 8192);
  } else if (w.stop_signal == 0 && WIFEXITED(w.wait_status) && failed(w)) {
    // A signal explains itself; a status does not, and this program wrote no error file.
    if (stopped_on_a_signal(w))
      line += " (128 + " + signal_name(WEXITSTATUS(w.wait_status) - 128) + ": it stopped on a stop signal, its own or another rank's)";
    line += " (no error recorded)";
  }
  return line;
}

}  // namespace dp::run
