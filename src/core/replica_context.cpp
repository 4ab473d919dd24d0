#include "dp/core/replica_context.h"

namespace dp {

namespace {
thread_local std::optional<ReplicaContext> tls_replica_context;
}  // namespace

std::optional<ReplicaContext> current_replica() { return tls_replica_context; }

namespace detail {
ReplicaContextScope::ReplicaContextScope(int index, int count) noexcept : previous_(tls_replica_context) {
  tls_replica_context = ReplicaContext{index, count};
}
ReplicaContextScope::~ReplicaContextScope() { tls_replica_context = previous_; }
}  // namespace detail

}  // namespace dp
