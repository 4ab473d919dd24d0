#pragma once
// Helpers of dp-run's end-to-end tests: start the built dp-run (DP_RUN_BIN, set by
// tools/CMakeLists.txt) on the scenario worker (DP_RUN_WORKER, tests/tools/workers/dp_run_worker.cpp)
// as a WorkerProcess (its output read line by line with deadlines; killed and reaped whatever
// happens), and pick apart what they print.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include <gtest/gtest.h>
#include "distributed/workers/worker_process.h"
#include "support/temp_files.h"

namespace dp_run_test {

using dp::test::mono_ms;
using dp::test::WorkerProcess;
using std::chrono::milliseconds;

#if defined(DP_RUN_BIN) && defined(DP_RUN_WORKER)
inline const char* kDpRun = DP_RUN_BIN;
inline const char* kWorker = DP_RUN_WORKER;
#else
inline const char* kDpRun = nullptr;  // tools not built (DP_BUILD_TOOLS=OFF)
inline const char* kWorker = nullptr;
#endif
#define DP_RUN_REQUIRE_BINARY() \
  if (::dp_run_test::kDpRun == nullptr) GTEST_SKIP() << "dp-run is not built (configure with -DDP_BUILD_TOOLS=ON)"

// A token file for several dp-runs of one job (mode 0600, in a directory removed at exit): the
// same for every test of the program, which is fine, each job having its own port.
inline const std::string& token_file() {
  static const std::string path = [] {
    static dp::test::TempDir dir;
    const std::string p = dir.file("job.token");
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const std::string token = "dp-run-test-token-0123456789abcdef\n";
    if (fd >= 0) {
      [[maybe_unused]] ssize_t n = ::write(fd, token.data(), token.size());
      ::close(fd);
    }
    return p;
  }();
  return path;
}

// The environment a test run adds to the test's own (from which start_dp_run removed the variables
// that would change dp-run's choices).
inline std::vector<std::string> clean_env(std::vector<std::string> extra = {}) {
  std::vector<std::string> env{"DP_DISTRIBUTED_DEBUG=0"};
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// dp-run with `args` (its options, "--", the program and its arguments).
inline std::unique_ptr<WorkerProcess> start_dp_run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  // Variables the test process may have that would change dp-run's choices are removed first.
  for (const char* name :
       {"DP_CPU_DEVICES", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "DP_TIMELINE", "DP_DIST_TIMEOUT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
        "LOCAL_WORLD_SIZE", "DP_ERROR_FILE", "DP_RESTART_COUNT", "DP_RUN_ID", "DP_STORE_TOKEN", "DP_STORE_TOKEN_FILE"})
    ::unsetenv(name);
  return std::make_unique<WorkerProcess>(kDpRun, args, clean_env(env));
}

// "dp-run [options] -- dp_run_worker [worker args]"
inline std::vector<std::string> job(std::vector<std::string> options, const std::vector<std::string>& worker_args) {
  options.push_back("--");
  options.push_back(kWorker);
  options.insert(options.end(), worker_args.begin(), worker_args.end());
  return options;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The integer after "<field>=" in a line, or -1.
inline int64_t field(const std::string& line, const std::string& name) {
  std::smatch m;
  return std::regex_search(line, m, std::regex("\\b" + name + "=(-?[0-9]+)")) ? std::stoll(m[1].str()) : -1;
}

// Every line of `text` that starts with `prefix`.
inline std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

// The report line dp-run printed for `rank`, or "".
inline std::string report_of(const std::string& text, int rank) {
  for (const std::string& line : lines_starting(text, "dp-run: rank " + std::to_string(rank) + " ")) return line;
  return "";
}

// Reads until the READY lines of `n` workers came; their pids by rank (empty on a timeout).
inline std::vector<pid_t> wait_ready(WorkerProcess& p, int n, milliseconds timeout) {
  std::vector<pid_t> pids(static_cast<size_t>(n), 0);
  int seen = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (seen < n) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    auto line = p.wait_for_line("READY", left);
    if (!line) return {};
    const int64_t rank = field(*line, "rank"), pid = field(*line, "pid");
    if (rank >= 0 && rank < n && pids[static_cast<size_t>(rank)] == 0) {
      pids[static_cast<size_t>(rank)] = static_cast<pid_t>(pid);
      ++seen;
    }
  }
  return pids;
}

// Whether the process is gone (or a zombie nobody has reaped yet: it runs no more).
inline bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string all;
  std::getline(stat, all);
  const size_t paren = all.rfind(')');
  return paren != std::string::npos && paren + 2 < all.size() && (all[paren + 2] == 'Z' || all[paren + 2] == 'X');
}

// A port nothing listens on now (bound and released; good enough for a test).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// The pids of the processes whose parent is `parent` (from /proc; a worker of a dp-run).
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string all;
    std::getline(stat, all);
    const size_t paren = all.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(all.substr(paren + 1));
    std::string state;
    long ppid = -1;
    rest >> state >> ppid;
    if (ppid == parent && state != "Z") out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

}  // namespace dp_run_test
