#pragma once
// A forked child for multi-process tests: runs a function in a fork()ed copy of the test process
// and reports its exit status; whatever path the test takes, the child is killed and reaped.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>

namespace dp::test {

// Runs `fn` in a forked child whose exit status is fn's result (100 if it threw). The destructor
// kills and reaps a child that is still running, so no test path leaves one behind.
class ForkedChild {
 public:
  explicit ForkedChild(const std::function<int()>& fn) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int code = 100;
      try {
        code = fn();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
      } catch (...) {
      }
      ::_exit(code);  // no atexit handlers, no gtest output from the child
    }
  }
  ~ForkedChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  // The child's exit code; -1 if it died by a signal or had to be killed after `timeout`.
  int wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }
  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace dp::test
