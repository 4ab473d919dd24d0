// Forming a gloo group through a store (gloo_rendezvous.h).
#include "distributed/gloo_rendezvous.h"
#include <unistd.h>
#include <algorithm>
#include <sstream>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include "distributed/gloo_store.h"
#include "dp/distributed/errors.h"

namespace dp::distributed::detail {
namespace {

std::string group_label(const std::string& name, int rank, int size) {
  return dp::detail::str("process group '", name, "' (rank ", rank, " of ", size, ")");
}

// The rank a key ends with: "default/0/arrived/3" -> 3, gloo's "gloo/rank_3" -> 3; -1 if none.
int rank_of_key(const std::string& key) {
  const size_t sep = key.find_last_of("/_");
  const std::string tail = sep == std::string::npos ? key : key.substr(sep + 1);
  if (tail.empty() || tail.size() > 9 || !std::all_of(tail.begin(), tail.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return std::stoi(tail);
}

std::vector<int> ranks_of_keys(const std::vector<std::string>& keys) {
  std::vector<int> ranks;
  for (const auto& k : keys)
    if (int r = rank_of_key(k); r >= 0) ranks.push_back(r);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

// "rank 2" / "ranks 2, 3"
std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string host_and_pid() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return dp::detail::str(host, " pid ", ::getpid());
}

// This process: "host pid N", and a random id that tells two processes with one pid apart (two
// containers, a pid reused), fixed for the process's life.
const std::string& process_identity() {
  static const std::string identity = [] {
    std::string id = host_and_pid();
    try {
      id += " id " + generate_store_token().substr(0, 16);
    } catch (...) {
    }
    return id;
  }();
  return identity;
}

// The text of an identity another process wrote (a peer's host name: made printable).
std::string identity_text(const Bytes& b) { return printable_text(std::string(b.begin(), b.end())); }

// Every rank agrees on the world size through one key, and claims its rank through another, before
// it counts as arrived: a rank started with another world size, or a second process claiming a rank
// that another one holds (a worker started twice), is refused at once, by name.
void claim_rank(Store& store, const std::string& name, int rank, int size, const std::string& who) {
  try {
    const std::string size_text = std::to_string(size);
    const Bytes agreed = store.compare_set(name + "/world_size", {}, Bytes(size_text.begin(), size_text.end()));
    if (std::string(agreed.begin(), agreed.end()) != size_text)
      throw RendezvousError(dp::detail::str(who, ": this process (", host_and_pid(), ") was started with world size ", size, ", but the group's is ",
                                            printable_text(std::string(agreed.begin(), agreed.end())),
                                            " (set by the first rank that arrived): every rank must be given the same world size"),
                            {});
    const std::string key = name + "/rank/" + std::to_string(rank);
    const std::string& me = process_identity();
    const Bytes mine(me.begin(), me.end());
    const Bytes holder = store.compare_set(key, {}, mine);
    if (holder != mine) {
      // Tell the holder, so a group still forming does not go on with a twin of one of its ranks.
      store.set(key + "/contender", mine);
      throw RendezvousError(dp::detail::str(who, ": rank ", rank, " is taken: ", identity_text(holder), " claimed it first, and this process (", me,
                                            ") claims it too (a worker started twice with RANK=", rank, "?)"),
                            {});
    }
  } catch (const RendezvousError&) {
    throw;
  } catch (const std::exception& e) {
    throw RendezvousError(who + ": cannot claim the rank through the store: " + e.what(), {});
  }
}

// After the arrival: a second process that claimed this rank meanwhile fails this one too.
void check_no_contender(Store& store, const std::string& name, int rank, const std::string& who) {
  const std::string key = name + "/rank/" + std::to_string(rank) + "/contender";
  Bytes other;
  try {
    if (!store.check({key})) return;
    other = store.get(key);
  } catch (const std::exception&) {
    return;  // the arrival went through; a later collective will report a store that is gone
  }
  throw RendezvousError(dp::detail::str(who, ": rank ", rank, " was claimed by two processes: this one (", process_identity(), ") and ",
                                        identity_text(other), " (a worker started twice with RANK=", rank, "?)"),
                        {});
}

int64_t join_generation(Store& store, const std::string& name, int size, const std::string& who) {
  try {
    return (store.add(name + "/joined", 1) - 1) / size;
  } catch (const std::exception& e) {
    throw RendezvousError(who + ": cannot join through the store: " + e.what(), {});
  }
}

// Every rank sets its key, then waits for everyone's; a timeout names exactly the missing ranks.
void wait_for_everyone(Store& group, const std::string& what, int rank, int size, const std::string& value, std::chrono::milliseconds timeout,
                       const std::string& who) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(what + "/" + std::to_string(r));
  try {
    group.set(keys[static_cast<size_t>(rank)], value);
    group.wait(keys, timeout);
  } catch (const StoreTimeout& e) {
    std::vector<int> missing = ranks_of_keys(e.keys());
    if (missing.empty()) throw RendezvousError(who + ": rendezvous timed out: " + e.what(), {});
    throw RendezvousError(dp::detail::str(who, ": ", ranks_text(missing), " did not arrive within ", timeout.count(), " ms (rendezvous step '", what,
                                          "', missing store key(s) under the group's prefix)"),
                          missing);
  } catch (const RendezvousError&) {
    throw;
  } catch (const std::exception& e) {
    throw RendezvousError(who + ": rendezvous through the store failed: " + e.what(), {});
  }
}

// gloo published in "gloo/<rank>" the listening address of each of that rank's pairs (one per
// peer, in rank order). These name a rank in two kinds of messages: a failed connect ("connect
// [10.0.0.2]:4242: Connection refused"), and errors on a pair whose accept raced with its own
// connect() call - gloo then keeps the peer's listening address as the peer's name instead of the
// connected socket's ("Connection closed by peer" with an address that is not in "addr/<rank>").
// Errors in reading the store are ignored: the book is for messages.
void add_listening_addresses(Store& group, int rank, int size, PeerAddressBook& book) {
  try {
    for (int r = 0; r < size; ++r) {
      if (r == rank || !group.check({"gloo/" + std::to_string(r)})) continue;
      const Bytes all = group.get("gloo/" + std::to_string(r));
      const size_t n = all.size() / static_cast<size_t>(size - 1);
      for (size_t off = 0; n > 0 && off + n <= all.size(); off += n) {
        const std::vector<char> bytes(all.begin() + static_cast<std::ptrdiff_t>(off), all.begin() + static_cast<std::ptrdiff_t>(off + n));
        std::string address = gloo::transport::tcp::Address(bytes).str();
        address = address.substr(0, address.find('$'));  // a sequence number, when gloo sets one
        book.add(address, r);
      }
    }
  } catch (...) {
  }
}

}  // namespace

GlooConnection connect_gloo(const std::shared_ptr<Store>& store, int rank, int size, const ProcessGroupOptions& options) {
  const std::string who = group_label(options.name, rank, size);
  const auto timeout = options.timeout;
  GlooConnection conn;
  claim_rank(*store, options.name, rank, size, who);
  conn.generation = join_generation(*store, options.name, size, who);
  auto group = std::make_shared<PrefixStore>(options.name + "/" + std::to_string(conn.generation), store);
  group->set_timeout(timeout);
  conn.group_store = group;

  wait_for_everyone(*group, "arrived", rank, size, host_and_pid(), timeout, who);
  check_no_contender(*store, options.name, rank, who);

  const std::string bind = options.bind_address.empty() ? "127.0.0.1" : options.bind_address;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = bind;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw DistributedError(dp::detail::str(who, ": cannot open gloo's TCP transport on bind address '", bind, "': ", strip_gloo_location(e.what())));
  }

  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  GlooStore gloo_store(group, "gloo/", timeout);
  try {
    context->connectFullMesh(gloo_store, device);
  } catch (const StoreTimeout& e) {
    const std::vector<int> missing = ranks_of_keys(e.keys());
    throw RendezvousError(dp::detail::str(who, ": ", missing.empty() ? std::string("some rank") : ranks_text(missing),
                                          " did not publish gloo addresses within ", timeout.count(), " ms (", e.what(), ")"),
                          missing);
  } catch (const DistributedError& e) {
    throw RendezvousError(who + ": gloo rendezvous failed: " + e.what(), {});
  } catch (const std::exception& e) {
    PeerAddressBook listening;
    add_listening_addresses(*group, rank, size, listening);
    const int peer = listening.find_in(e.what());
    throw RendezvousError(dp::detail::str(who, ": connecting to ", peer >= 0 ? "rank " + std::to_string(peer) : std::string("a peer"),
                                          " failed (bind address ", bind, "): ", strip_gloo_location(e.what())),
                          peer >= 0 ? std::vector<int>{peer} : std::vector<int>{});
  }

  // Step 4: "<peer> <address>" lines, the address being this rank's end of its connection to peer.
  std::ostringstream mine;
  for (int peer = 0; peer < size; ++peer)
    if (peer != rank) mine << peer << ' ' << context->getPair(peer)->address().str() << '\n';
  wait_for_everyone(*group, "addr", rank, size, mine.str(), timeout, who);
  for (int other = 0; other < size; ++other) {
    if (other == rank) continue;
    std::istringstream lines(group->get_string("addr/" + std::to_string(other)));
    int peer = -1;
    std::string address;
    while (lines >> peer >> address)
      if (peer == rank) conn.peers.add(address, other);
  }
  // After the connected addresses: the book answers with the first match, and a port a client pair
  // closed its listener on may since have been reused by a live connection.
  add_listening_addresses(*group, rank, size, conn.peers);
  conn.context = std::move(context);
  return conn;
}

}  // namespace dp::distributed::detail
