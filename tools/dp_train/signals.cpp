#include "signals.h"

#include <atomic>
#include <csignal>

namespace dp::train {
namespace {

std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int sig) { g_stop.store(sig, std::memory_order_relaxed); }

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a checkpoint being written when the signal lands is not cut short by EINTR.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A closed terminal or SSH session: stop as for SIGTERM (checkpoint, then exit 128 + 1 = 129).
  sigaction(SIGHUP, &sa, nullptr);
}

int stop_signal() { return g_stop.load(std::memory_order_relaxed); }

}  // namespace dp::train
