#pragma once
// The DataParallel replica a thread is running the forward of: parallel_apply (and so
// DataParallel) sets it around each replica's forward; modules whose replicas cooperate
// (nn::SyncBatchNorm's statistics) read it.
#include <optional>

namespace dp {

struct ReplicaContext {
  int index = 0;  // this replica
  int count = 1;  // how many replicas run together in that call
};

// nullopt outside a replica's forward.
std::optional<ReplicaContext> current_replica();

namespace detail {
// Sets current_replica() for this thread while alive; scopes nest (the previous one is restored).
class ReplicaContextScope {
 public:
  ReplicaContextScope(int index, int count) noexcept;
  ~ReplicaContextScope();
  ReplicaContextScope(const ReplicaContextScope&) = delete;
  ReplicaContextScope& operator=(const ReplicaContextScope&) = delete;

 private:
  std::optional<ReplicaContext> previous_;
};
}  // namespace detail

}  // namespace dp
