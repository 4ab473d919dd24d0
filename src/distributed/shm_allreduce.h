#pragma once
// Allreduce through shared memory, for a group whose ranks all run on one host (the usual
// `dp-run --nproc-per-node N` job on one machine, and ranks that are threads of one process).
//
// Why: over loopback TCP every gradient byte is copied into the kernel by the sender and out of it
// by the receiver, on the same cores that compute the model; on a small machine that CPU time is
// most of DDP's cost. Here each rank copies the part of its buffer the others need into its slot of
// one shared segment, reduces its own 1/size of the elements straight from its buffer and the
// others' slots, and copies the other reduced parts back: about a third of the memory traffic, no
// system call per byte. Every part is reduced by exactly one rank in a fixed order, so all ranks
// get bit-identical results, run after run.
//
// When: connect() is called by every rank of a new group (a collective, through the group's store).
// Every rank publishes its host identity (boot id and the mount, IPC, network and PID namespaces
// of the process, and its user id); only when all agree, DP_SHM is not 0, and the segment can be
// created and mapped by every rank, do all ranks use the channel (they decide together). Ranks in
// different network namespaces count as different hosts: they are how tests and benchmarks stand
// for separate machines, and their traffic must cross the network between them.
//
// Safety: the segment is a POSIX shared-memory object created with O_EXCL and mode 0600 under a
// random name that only the group's (authenticated) store carries, reserved with fallocate (a full
// /dev/shm is a clear fallback to TCP at start, never a SIGBUS later), and unlinked as soon as every
// rank has mapped it (nothing is left behind, whatever happens to the processes). Waits sleep on a
// futex in the segment, bounded by the operation's timeout; a waiting rank notices a peer process
// that exited (pidfd) or a peer that marked its channel aborted (after an error of its own, or on
// destruction) and fails at once, as a lost TCP connection does.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include "dp/core/dtype.h"
#include "dp/distributed/process_group.h"
#include "dp/distributed/store.h"

namespace dp::distributed::detail {

// A peer process exited, or aborted its side of the channel, while this rank waited for it. what()
// continues "lost rank N (": "pid 123, shared memory): its process exited".
class ShmPeerLost : public std::runtime_error {
 public:
  ShmPeerLost(const std::string& what, int rank) : std::runtime_error(what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

class ShmChannel {
 public:
  // Called by every rank of a group, with the group's store; nullptr on every rank when the
  // channel cannot be used by all of them (then *why says why, for the group's debug output).
  static std::unique_ptr<ShmChannel> connect(Store& group_store, int rank, int size, std::chrono::milliseconds timeout, std::string* why = nullptr);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // data[0..count) of dtype `wire` reduced in place across ranks (Avg reduces as Sum, as
  // gloo_allreduce). Throws ShmPeerLost, or gloo::IoException with a timeout text (translated like
  // gloo's own timeouts) when `timeout` passes.
  void allreduce(void* data, size_t count, DType wire, ReduceOp op, std::chrono::milliseconds timeout);
  // This rank will not take part any more (an error, or the group closing): peers waiting for it
  // fail now instead of at their timeout. Idempotent; never throws.
  void abort() noexcept;

  // The bytes each rank's slot holds per chunk (for tests: a buffer larger than this is reduced in
  // several chunks).
  size_t slot_bytes() const { return slot_bytes_; }

  // The segment's header (defined in the source file).
  struct Header;

 private:
  ShmChannel(int rank, int size, void* base, size_t bytes, std::vector<int> pidfds);
  void arrive(uint32_t phase);
  void wait_all(uint32_t phase, std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout);
  void check_peers();
  uint8_t* slot(int set, int r) const;

  int rank_;
  int size_;
  void* base_;
  size_t bytes_;
  size_t slot_bytes_ = 0;
  Header* header_;
  std::vector<int> pidfds_;  // per rank: a pidfd of that rank's process, or -1 (this process)
  uint32_t phase_ = 0;       // this rank's last arrival
  uint64_t chunks_ = 0;      // chunks done: chunk k uses slot set k % 2
  bool aborted_ = false;
};

// The identity of this process's host as the channel compares it (empty when it cannot tell).
std::string shm_host_identity();

}  // namespace dp::distributed::detail
