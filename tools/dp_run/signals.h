#pragma once
// dp-run's signals: SIGINT, SIGTERM and SIGHUP are counted (the supervisor passes them on to the
// workers), SIGCHLD only wakes the supervisor. Every handler writes a byte to a self-pipe, so the
// supervision loop sleeps in poll() and wakes at once when something happened.
namespace dp::run {

void install_signal_handlers();
// Sleeps until a signal arrives or timeout_ms passes (0: only drains); returns at once if one
// arrived since the last call.
void wait_for_signal_or(int timeout_ms);
// The last stop signal received (SIGINT, SIGTERM, SIGHUP) and how many arrived in all; 0, 0 when none.
int stop_signal();
int stop_signal_count();

// While alive, the calling thread blocks dp-run's signals, so a thread started meanwhile (the store
// server's, the node watcher) inherits the mask and every signal goes to the main thread.
class SignalsBlocked {
 public:
  SignalsBlocked();
  ~SignalsBlocked();
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  unsigned char saved_[128];  // a sigset_t
};

}  // namespace dp::run
