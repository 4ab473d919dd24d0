#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dp::run {

std::string resolve_program(const std::string& program, const std::string& path_env) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.empty()) throw std::runtime_error("the program's name is empty");
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), F_OK) != 0) throw std::runtime_error("cannot run '" + program + "': " + std::strerror(errno));
    if (!executable(program)) throw std::runtime_error("cannot run '" + program + "': it is not an executable file");
    return program;
  }
  size_t start = 0;
  for (;;) {
    const size_t colon = path_env.find(':', start);
    // An empty PATH entry is the current directory.
    std::string candidate = colon == start || start == path_env.size() ? std::string(".") : path_env.substr(start, colon - start);
    candidate.push_back('/');
    candidate.append(program);
    if (executable(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw std::runtime_error("cannot run '" + program + "': no such program in PATH");
}

pid_t spawn_process(const std::string& path, const std::vector<std::string>& argv_s, const std::vector<std::string>& env_s) {
  // Everything the child needs exists before fork(): between fork and exec only async-signal-safe
  // calls (dp-run has threads: the store server, the node watcher).
  std::vector<char*> argv, envp;
  std::vector<std::string> argv_copy = argv_s, env_copy = env_s;
  for (auto& s : argv_copy) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env_copy) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string path_copy = path;

  // exec's failure travels back through a close-on-exec pipe: EOF means exec succeeded.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(report[0]);
    ::close(report[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(report[0]);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // dp-run died before the death signal was armed
    // dp-run's handlers are reset by exec, but ignored signals and the mask are inherited.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGQUIT}) ::sigaction(sig, &dfl, nullptr);
    // SIGPIPE ignored (exec keeps that), as in every Python program torchrun starts, which is how
    // Gloo is used and tested: a write to a peer that died is an EPIPE error the collective library
    // can name, not a silent death of the survivor (Gloo's TCP transport writes without MSG_NOSIGNAL).
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ign, nullptr);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);  // dup2 clears close-on-exec on the copy
    }
    ::execve(path_copy.c_str(), argv.data(), envp.data());
    const int err = errno;
    ssize_t ignored = ::write(report[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  ::close(report[1]);
  int err = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof err)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw std::runtime_error("cannot run '" + path + "': " + std::strerror(err));
  }
  return pid;
}

void signal_group(pid_t pid, int sig) {
  if (pid <= 0) return;
  // The group is the worker's own (setpgid in the child); if the child had not got there yet, the
  // pid itself still is its process.
  if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

std::string signal_name(int sig) {
  if (const char* abbrev = ::sigabbrev_np(sig)) {
    std::string name = "SIG";
    name.append(abbrev);
    return name;
  }
  return "signal " + std::to_string(sig);
}

}  // namespace dp::run
