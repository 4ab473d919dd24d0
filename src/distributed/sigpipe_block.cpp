#include "distributed/sigpipe_block.h"
#include <ctime>

namespace dp::distributed::detail {
namespace {
sigset_t only_sigpipe() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGPIPE);
  return s;
}
bool sigpipe_pending() {
  sigset_t p;
  sigemptyset(&p);
  return sigpending(&p) == 0 && sigismember(&p, SIGPIPE) == 1;
}
}  // namespace

SigpipeBlock::SigpipeBlock() {
  const sigset_t s = only_sigpipe();
  if (pthread_sigmask(SIG_BLOCK, &s, &old_) != 0) return;
  blocked_here_ = sigismember(&old_, SIGPIPE) == 0;
  pending_before_ = blocked_here_ && sigpipe_pending();
}

SigpipeBlock::~SigpipeBlock() {
  if (!blocked_here_) return;
  if (!pending_before_ && sigpipe_pending()) {
    const sigset_t s = only_sigpipe();
    const timespec zero{0, 0};
    sigtimedwait(&s, nullptr, &zero);  // ours: raised by a write to a dead peer
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace dp::distributed::detail
