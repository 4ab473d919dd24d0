#pragma once
// Forming a gloo group through a store:
//  0. Identity: every rank agrees on the world size ("<name>/world_size", compare_set) and claims
//     its rank ("<name>/rank/<r>": "host pid N id X", compare_set): another world size, or a second
//     process claiming a rank another process holds, is a RendezvousError naming both at once (and
//     a contender that comes while the group forms fails the holder too). A process may claim its
//     own rank again (a second group of the same name).
//  1. A generation number, so that a second group of the same name in the same store (a restart, a
//     test making two groups) never reads the first one's keys: every rank adds 1 to
//     "<name>/joined"; the n-th arrival belongs to generation (n - 1) / size. That holds while
//     every earlier group of this name on this store was joined by all its ranks; a launcher that
//     restarts after a partial start gives the new run a fresh store (or prefix).
//  2. An arrival check in "<name>/<generation>/": each rank sets "arrived/<rank>" and waits for
//     all; a rank that does not come is named in a RendezvousError (the missing keys are the
//     missing ranks) instead of surfacing as a gloo timeout on some pair.
//  3. gloo's connectFullMesh through GlooStore ("gloo/..." keys), every gloo exception caught.
//  4. Each rank publishes "addr/<rank>": the local socket address of its connection to each peer,
//     which is what that peer's gloo prints when the connection breaks; every rank reads the
//     others' so a later "Connection closed by peer [127.0.0.1]:41235" maps to a rank.
#include <chrono>
#include <memory>
#include <string>
#include "distributed/gloo_errors.h"
#include "dp/distributed/process_group.h"
#include "dp/distributed/store.h"

namespace gloo {
class Context;
}

namespace dp::distributed::detail {

class ShmChannel;

struct GlooConnection {
  std::shared_ptr<gloo::Context> context;
  std::shared_ptr<Store> group_store;  // "<name>/<generation>/" in the caller's store
  int64_t generation = 0;
  PeerAddressBook peers;
  // Allreduce through shared memory when every rank is on this host (shm_allreduce.h); else null.
  std::shared_ptr<ShmChannel> shm;
};

// Throws RendezvousError naming the ranks that did not arrive or could not be connected to, within
// about options.timeout per phase.
GlooConnection connect_gloo(const std::shared_ptr<Store>& store, int rank, int size, const ProcessGroupOptions& options);

}  // namespace dp::distributed::detail
