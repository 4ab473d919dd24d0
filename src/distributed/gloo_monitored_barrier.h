#pragma once
// monitored_barrier through the store (not through gloo, so it names ranks even when the transport
// is what is stuck): rank r sets "mb/<n>/<r>"; rank 0 waits for everyone's key and then sets
// "mb/<n>/release" to "ok" or to the list of ranks that did not come; the other ranks wait for the
// release (once rank 0 has arrived, for up to timeout + 1 s: rank 0's own wait). n counts this group's monitored barriers (every rank calls them in
// the same order).
#include <chrono>
#include <cstdint>
#include <string>
#include "dp/distributed/store.h"

namespace dp::distributed::detail {

// Throws RendezvousError naming the missing ranks (on rank 0, and on the others once rank 0 has
// released them with the list), or naming rank 0 when it never released the barrier. `who` is
// "process group 'default' (rank 1 of 4)" for messages.
void store_monitored_barrier(Store& store, const std::string& who, int rank, int size, uint64_t n, std::chrono::milliseconds timeout,
                             bool wait_all_ranks);

}  // namespace dp::distributed::detail
