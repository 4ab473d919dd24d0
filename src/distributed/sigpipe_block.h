#pragma once
// Gloo writes to its sockets without MSG_NOSIGNAL, so a write to a peer that just died raises
// SIGPIPE, whose default action kills the whole process before Gloo can report the broken pipe as
// the error it is. A group blocks SIGPIPE on the threads that run Gloo: while it creates them (they
// inherit the mask: Gloo's I/O thread, the communication thread) and around every operation (a
// waiting caller may run one itself). A SIGPIPE raised meanwhile is discarded when the block ends;
// the write's EPIPE is what reports the failure.
#include <signal.h>

namespace dp::distributed::detail {

class SigpipeBlock {
 public:
  SigpipeBlock();
  ~SigpipeBlock();
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t old_;
  bool blocked_here_ = false;    // it was not blocked before
  bool pending_before_ = false;  // a SIGPIPE was already pending: not ours to discard
};

}  // namespace dp::distributed::detail
