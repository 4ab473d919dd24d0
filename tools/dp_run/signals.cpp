#include "signals.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>

namespace dp::run {
namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_last_stop{0};
std::atomic<int> g_stop_count{0};

extern "C" void on_signal(int sig) {
  const int saved = errno;
  if (sig != SIGCHLD) {
    g_last_stop.store(sig, std::memory_order_relaxed);
    g_stop_count.fetch_add(1, std::memory_order_relaxed);
  }
  const char byte = 1;
  ssize_t ignored = ::write(g_pipe[1], &byte, 1);  // a full pipe already wakes the loop
  (void)ignored;
  errno = saved;
}

}  // namespace

void install_signal_handlers() {
  if (g_pipe[0] >= 0) return;
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;  // then the loop polls on its timeout only
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(sig, &sa, nullptr);
  // A closed stdout or stderr (the terminal went away) must not kill dp-run while it has workers.
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, nullptr);
}

void wait_for_signal_or(int timeout_ms) {
  if (g_pipe[0] < 0) {
    if (timeout_ms > 0) ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    return;
  }
  pollfd p{g_pipe[0], POLLIN, 0};
  if (::poll(&p, 1, timeout_ms < 0 ? 0 : timeout_ms) > 0) {
    char buf[64];
    while (::read(g_pipe[0], buf, sizeof buf) > 0) {
    }
  }
}

SignalsBlocked::SignalsBlocked() {
  static_assert(sizeof(sigset_t) <= sizeof(saved_));
  sigset_t block;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&block, sig);
  ::pthread_sigmask(SIG_BLOCK, &block, reinterpret_cast<sigset_t*>(saved_));
}

SignalsBlocked::~SignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, reinterpret_cast<const sigset_t*>(saved_), nullptr); }

int stop_signal() { return g_last_stop.load(std::memory_order_relaxed); }
int stop_signal_count() { return g_stop_count.load(std::memory_order_relaxed); }

}  // namespace dp::run
