#pragma once
// The errors of dp::distributed. Every one names ranks: which peer was lost, which ranks are behind,
// which never arrived. All derive from DistributedError (itself a dp::Error), so one catch clause
// takes them all; the typed fields let a program (or dp-run) act on them without parsing text.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include "dp/core/errors.h"

namespace dp::distributed {

class DistributedError : public Error {
 public:
  using Error::Error;
};

// A peer's connection broke while an operation was in flight (its process died, its machine went
// away): "rank 1 (127.0.0.1:41235) was lost during allreduce #42 (collective sequence number)".
class PeerLostError : public DistributedError {
 public:
  PeerLostError(const std::string& msg, int peer_rank, std::string operation, uint64_t sequence)
      : DistributedError(msg), peer_rank_(peer_rank), operation_(std::move(operation)), sequence_(sequence) {}
  int peer_rank() const { return peer_rank_; }  // -1 when the peer could not be identified
  const std::string& operation() const { return operation_; }
  uint64_t sequence() const { return sequence_; }

 private:
  int peer_rank_;
  std::string operation_;
  uint64_t sequence_;
};

// An operation did not complete within its timeout: which one, how long it waited, and which ranks
// had not reached it (from the progress every rank publishes in the store; empty when unknown).
class CollectiveTimeout : public DistributedError {
 public:
  CollectiveTimeout(const std::string& msg, std::string operation, uint64_t sequence, std::chrono::milliseconds waited, std::vector<int> ranks_behind)
      : DistributedError(msg), operation_(std::move(operation)), sequence_(sequence), waited_(waited), ranks_behind_(std::move(ranks_behind)) {}
  const std::string& operation() const { return operation_; }
  uint64_t sequence() const { return sequence_; }
  std::chrono::milliseconds waited() const { return waited_; }
  const std::vector<int>& ranks_behind() const { return ranks_behind_; }

 private:
  std::string operation_;
  uint64_t sequence_;
  std::chrono::milliseconds waited_;
  std::vector<int> ranks_behind_;
};

// The group could not form: the ranks that never arrived (or, from monitored_barrier, that did not
// reach the barrier in time).
class RendezvousError : public DistributedError {
 public:
  RendezvousError(const std::string& msg, std::vector<int> missing_ranks) : DistributedError(msg), missing_ranks_(std::move(missing_ranks)) {}
  const std::vector<int>& missing_ranks() const { return missing_ranks_; }

 private:
  std::vector<int> missing_ranks_;
};

// A store operation failed: a key did not appear in time (the keys are named), the server is
// unreachable, or the file is unusable.
class StoreError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};
class StoreTimeout : public StoreError {
 public:
  StoreTimeout(const std::string& msg, std::vector<std::string> keys) : StoreError(msg), keys_(std::move(keys)) {}
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  std::vector<std::string> keys_;
};

// DP_DISTRIBUTED_DEBUG=1: ranks issued different collectives (operation, dtype or size) at the same
// sequence number; names the first rank that differs and both descriptions.
class CollectiveMismatch : public DistributedError {
 public:
  CollectiveMismatch(const std::string& msg, int rank) : DistributedError(msg), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// Text that came from another process or machine (a store value, a peer's host name or error
// line), made safe for a terminal or a log: control characters (C0, DEL, C1: terminal escapes, a
// newline that would forge a line) and bytes that are not UTF-8 are written as \\x and two hex digits, and text past
// max_bytes is cut, with "... (N bytes)" saying how long it was.
std::string printable_text(std::string_view text, size_t max_bytes = 200);

}  // namespace dp::distributed
