// TCPStoreServer: one thread serves every client through epoll (no thread per client, so a job of
// hundreds of ranks costs one thread). Connections are non-blocking; each has an input buffer
// that collects one frame at a time and an output buffer. get/wait on missing keys are parked, not
// blocked on: the thread answers them when a write supplies the keys or their timeout passes.
// Hostile input closes only the connection that sent it (frames are bounded; see the protocol).
#include <errno.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <algorithm>
#include <atomic>
#include <climits>
#include <deque>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include "distributed/socket.h"
#include "distributed/store_common.h"
#include "distributed/tcp_store_protocol.h"
#include "dp/distributed/store.h"

namespace dp::distributed {

namespace {

using namespace tcp_store;
using net::Clock;

// epoll tags: the wake-up eventfd, the listening sockets, then connections.
constexpr uint64_t kWakeTag = 0;
constexpr uint64_t kFirstListenerTag = 1;
constexpr uint64_t kFirstConnectionTag = uint64_t{1} << 32;

// Stop reading a connection's requests while this much of its answers is unsent (the
// per-connection budget: answers are counted before they are built, and large values are shared): a client that
// sends but never reads cannot make the server buffer without bound.
constexpr size_t kOutputHighWater = size_t{1} << 20;
// Receive in pieces of at least this, at most kMaxRead (the rest of a large frame comes next time).
constexpr size_t kReadChunk = size_t{64} << 10;
constexpr size_t kMaxRead = size_t{16} << 20;
// Out of descriptors: stop accepting for this long rather than spin on a listener that stays ready.
constexpr std::chrono::milliseconds kAcceptPause{100};
// A client's timeout is clamped to this (a month): keeps deadlines far from overflow.
constexpr uint64_t kMaxTimeoutMs = 30ULL * 24 * 3600 * 1000;

// Received bytes not yet parsed. Grows without clearing the new space (a 64 MiB value arrives in
// many pieces: std::vector::resize would zero-fill the rest of the frame before every read), and
// gives large memory back once it is empty.
class InBuffer {
 public:
  const uint8_t* data() const { return buf_.get() + begin_; }
  size_t size() const { return end_ - begin_; }
  void consume(size_t n) {
    begin_ += n;
    if (begin_ < end_) return;
    begin_ = end_ = 0;
    if (capacity_ > kKeepBytes) {
      buf_.reset();
      capacity_ = 0;
    }
  }
  // Space for at least n more bytes, at tail(); commit() what was written there.
  uint8_t* tail(size_t n) {
    if (capacity_ - end_ < n && begin_ > 0) {  // move the unparsed bytes to the front first
      std::memmove(buf_.get(), buf_.get() + begin_, size());
      end_ -= begin_;
      begin_ = 0;
    }
    if (capacity_ - end_ < n) {
      const size_t capacity = std::max(capacity_ * 2, end_ + n);
      std::unique_ptr<uint8_t[]> grown(new uint8_t[capacity]);  // default-initialised: not cleared
      if (end_ > 0) std::memcpy(grown.get(), buf_.get(), end_);
      buf_ = std::move(grown);
      capacity_ = capacity;
    }
    return buf_.get() + end_;
  }
  void commit(size_t n) { end_ += n; }

 private:
  static constexpr size_t kKeepBytes = size_t{1} << 20;
  std::unique_ptr<uint8_t[]> buf_;
  size_t capacity_ = 0, begin_ = 0, end_ = 0;
};

// Unsent answer bytes: owned (headers, small answers) or a stored value shared with the store's
// map, so a thousand clients reading one large value hold one copy of it, not a thousand.
struct OutSegment {
  Bytes owned;
  std::shared_ptr<const Bytes> shared;
  size_t offset = 0;
  const uint8_t* data() const { return (shared ? shared->data() : owned.data()) + offset; }
  size_t size() const { return (shared ? shared->size() : owned.size()) - offset; }
};

struct Connection {
  net::Fd fd;
  std::string peer;  // the client's address (no port), for the log
  Clock::time_point accepted;
  bool authenticated = false;
  uint8_t nonce[kNonceBytes] = {};  // Ns, this connection's challenge
  // Before authentication only this is read: exactly one kAuth frame, nothing a peer can size.
  uint8_t hs[kHeaderBytes + kAuthBody] = {};
  size_t hs_have = 0;
  InBuffer in;
  std::deque<OutSegment> out;
  size_t out_bytes = 0;   // unsent bytes in `out`
  uint32_t interest = 0;  // the epoll events registered now
  // A parked get (one key) or wait: answered when every key exists, or at the deadline.
  bool parked = false;
  uint8_t parked_command = 0;
  std::vector<std::string> parked_keys;
  size_t cursor = 0;  // parked_keys[0, cursor) existed when last looked at; keys[cursor] is watched
  Clock::time_point deadline;
  Clock::time_point accepted_wait;  // when the parked request came

  size_t out_pending() const { return out_bytes; }
};

// A listening socket on `address`, or an invalid Fd with the errno in *err.
net::Fd bind_one(const net::Address& address, int* err) {
  net::Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *err = errno;
    return fd;
  }
  int one = 1;
  // A restarted job may rebind its port while the last run's connections sit in TIME_WAIT.
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (address.family() == AF_INET6) {
    // The IPv6 wildcard also takes IPv4 clients; a specific IPv6 address only itself.
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&address.storage);
    int v6only = IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr) ? 0 : 1;
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
  }
  if (::bind(fd.get(), address.get(), address.length) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
    *err = errno;
    fd.reset();
  }
  return fd;
}

std::string bind_error_text(const net::Address& address, int err) {
  if (err == EADDRINUSE)
    return "the address is already in use (another job, or an earlier run that has not exited, may hold this port; "
           "choose another port, or port 0 for any free one)";
  if (err == EACCES) return "permission denied (ports below 1024 need privileges)";
  if (err == EADDRNOTAVAIL) return net::numeric_host(address) + " is not an address of this machine";
  return net::errno_text(err);
}

uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

void set_port(net::Address& a, uint16_t port) {
  if (a.family() == AF_INET) reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(port);
  if (a.family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(port);
}

// Listening sockets on every address `host` names ("localhost" may be both ::1 and 127.0.0.1, and
// a client may try either), all on one port: the requested one, or the one the first bind chose.
std::vector<net::Fd> listen_on(const std::string& host, uint16_t port, uint16_t* bound_port) {
  const std::string where = net::endpoint(host.empty() ? "*" : host, port);
  std::vector<net::Address> addresses;
  if (host.empty()) {
    // Every interface: the IPv6 wildcard in dual-stack mode, or IPv4's where IPv6 is missing.
    int err = 0;
    addresses = net::resolve("::", port, true, &err);
    const int probe = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (err != 0 || probe < 0) addresses = net::resolve("0.0.0.0", port, true, &err);
    if (probe >= 0) ::close(probe);
  } else {
    int err = 0;
    addresses = net::resolve(host, port, true, &err);
    if (err != 0)
      throw StoreError(detail::str("TCPStoreServer: cannot listen on ", where, ": the host name does not resolve (", ::gai_strerror(err), ")"));
  }
  // With port 0 a later address may find the first one's port taken: choose again (a few times).
  for (int attempt = 0;; ++attempt) {
    std::vector<net::Fd> fds;
    uint16_t chosen = port;
    bool retry = false;
    std::string first_error;
    for (auto a : addresses) {
      set_port(a, chosen);
      int err = 0;
      net::Fd fd = bind_one(a, &err);
      if (fd.valid()) {
        if (chosen == 0) chosen = local_port(fd.get());
        fds.push_back(std::move(fd));
        continue;
      }
      const std::string what = detail::str("TCPStoreServer: cannot listen on ", net::endpoint(host.empty() ? "*" : host, chosen), " (",
                                           net::numeric_host(a), "): ", bind_error_text(a, err));
      // A taken port fails the server, unless we chose it ourselves and can choose again. Another
      // failure (an address of the name this machine cannot use: IPv6 switched off) skips the address.
      if (err == EADDRINUSE && port == 0 && !fds.empty() && attempt < 8) {
        retry = true;
        break;
      }
      if (err == EADDRINUSE) throw StoreError(what);
      if (first_error.empty()) first_error = what;
    }
    if (retry) continue;
    if (fds.empty()) throw StoreError(first_error.empty() ? "TCPStoreServer: no address to listen on for " + where : first_error);
    *bound_port = chosen;
    return fds;
  }
}

void check_server_options(const TCPStoreServerOptions& o) {
  if (o.token.empty()) {
    DP_CHECK(o.insecure, ValueError,
             "TCPStoreServer: no token: a store without one is open to anyone who can reach its port (they could read and write every "
             "key and stop the job). Give TCPStoreServerOptions::token the job's secret (generate_store_token()), or set insecure for a "
             "throwaway run on a trusted machine");
  } else {
    check_store_token(o.token, "TCPStoreServerOptions::token");
  }
  DP_CHECK(o.max_key_bytes >= 1 && o.max_key_bytes <= kMaxKeyBytesCap, ValueError, "TCPStoreServerOptions::max_key_bytes ", o.max_key_bytes,
           " is not in [1, ", kMaxKeyBytesCap, "]");
  DP_CHECK(o.max_value_bytes >= 1 && o.max_value_bytes <= kMaxValueBytesCap, ValueError, "TCPStoreServerOptions::max_value_bytes ", o.max_value_bytes,
           " is not in [1, ", kMaxValueBytesCap, "]");
  DP_CHECK(o.max_keys_per_request >= 1 && o.max_keys_per_request <= UINT32_MAX, ValueError, "TCPStoreServerOptions::max_keys_per_request ",
           o.max_keys_per_request, " is not in [1, 2^32)");
  DP_CHECK(o.max_total_bytes >= 1, ValueError, "TCPStoreServerOptions::max_total_bytes must be at least 1");
  DP_CHECK(o.max_parked_keys >= 1, ValueError, "TCPStoreServerOptions::max_parked_keys must be at least 1");
  DP_CHECK(o.max_connections >= 1, ValueError, "TCPStoreServerOptions::max_connections must be at least 1");
  DP_CHECK(o.max_unauthenticated >= 1, ValueError, "TCPStoreServerOptions::max_unauthenticated must be at least 1");
  DP_CHECK(o.handshake_timeout.count() >= 1, ValueError, "TCPStoreServerOptions::handshake_timeout must be at least 1 ms");
  DP_CHECK(o.max_wait.count() >= 0, ValueError, "TCPStoreServerOptions::max_wait must not be negative");
}

std::string bytes_text(size_t n) {
  if (n >= (size_t{1} << 30) && n % (size_t{1} << 30) == 0) return std::to_string(n >> 30) + " GiB";
  if (n >= (size_t{1} << 20) && n % (size_t{1} << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= (size_t{1} << 10) && n % (size_t{1} << 10) == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " bytes";
}

// The numeric address of a connected peer (no port: the log is once per address).
std::string peer_address(int fd) {
  net::Address a;
  a.length = sizeof a.storage;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) return "?";
  return net::numeric_host(a);
}

// The server's state; touched only by its thread (after construction).
class ServerLoop {
 public:
  ServerLoop(std::vector<net::Fd> listeners, std::atomic<bool>* stop, TCPStoreServerOptions options)
      : listeners_(std::move(listeners)), stop_(stop), o_(std::move(options)) {
    max_body_ = max_body_bytes(o_.max_key_bytes, o_.max_value_bytes);
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!epoll_.valid() || !wake_.valid()) {
      const int err = errno;
      throw StoreError("TCPStoreServer: cannot create its epoll/eventfd descriptors: " + net::errno_text(err));
    }
    add_fd(wake_.get(), EPOLLIN, kWakeTag);
    for (size_t i = 0; i < listeners_.size(); ++i) add_fd(listeners_[i].get(), EPOLLIN, kFirstListenerTag + i);
  }

  ~ServerLoop() { OPENSSL_cleanse(o_.token.data(), o_.token.size()); }

  // Called from another thread: makes run() return promptly.
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
  }

  void run() {
    epoll_event events[128];
    while (!stop_->load()) {
      const int n = ::epoll_wait(epoll_.get(), events, 128, next_timeout_ms());
      if (n < 0 && errno != EINTR) {
        // Not expected (epoll_wait fails only on bad arguments); do not spin.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      try {
        for (int i = 0; i < n && !stop_->load(); ++i) {
          const uint64_t tag = events[i].data.u64;
          if (tag == kWakeTag) continue;  // only ever written to stop: the loop condition ends it
          if (tag < kFirstConnectionTag) {
            accept_all(tag - kFirstListenerTag);
          } else {
            handle(tag, events[i].events);
          }
          drain_touched();
        }
        expire_parked();
        expire_handshakes();
        resume_accepting();
        drain_touched();
      } catch (...) {
        // Out of memory outside a connection's own handling (accepting, timing out): the thread
        // must live on (an exception leaving it would end the process); try again shortly.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }

 private:
  bool open_store() const { return o_.token.empty(); }

  void add_fd(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  }

  int next_timeout_ms() const {
    std::optional<Clock::time_point> next;
    if (!deadlines_.empty()) next = std::get<0>(*deadlines_.begin());
    if (!unauthenticated_.empty()) {
      const Connection* oldest = find_const(*unauthenticated_.begin());
      if (oldest != nullptr) {
        const auto t = oldest->accepted + o_.handshake_timeout;
        if (!next || t < *next) next = t;
      }
    }
    if (accept_paused_until_ && (!next || *accept_paused_until_ < *next)) next = accept_paused_until_;
    return next ? net::poll_timeout_ms(*next) : -1;
  }

  // --- the log ------------------------------------------------------------------------------

  // One line per (peer address, reason); a bounded memory of what was said.
  void log_once(const std::string& peer, const std::string& reason, const std::string& text) {
    if (logged_.size() >= kMaxLogged) {
      if (!log_full_) write_log("more refusals follow from other addresses or for other reasons; they are not logged");
      log_full_ = true;
      return;
    }
    if (!logged_.insert(peer + "\n" + reason).second) return;
    write_log(text + " (logged once per address and reason)");
  }

  void write_log(const std::string& text) {
    try {
      if (o_.log) {
        o_.log(text);
        return;
      }
    } catch (...) {
      return;
    }
    const std::string line = "dp::distributed::TCPStoreServer: " + text + "\n";
    [[maybe_unused]] ssize_t n = ::write(2, line.data(), line.size());
  }

  // --- connections ----------------------------------------------------------------------------

  void accept_all(size_t listener) {
    // Bounded per wake-up so a connection storm does not starve the connected clients.
    for (int i = 0; i < 256; ++i) {
      if (!open_store() && unauthenticated_.size() >= o_.max_unauthenticated && !evict_oldest_unauthenticated()) return;
      const int fd = ::accept4(listeners_[listener].get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) pause_accepting(Clock::now() + kAcceptPause);
        return;
      }
      net::Fd owned(fd);
      if (authenticated_ >= o_.max_connections) {
        log_once("*", "connections",
                 detail::str("refused a connection from ", peer_address(fd), ": the store already has ", authenticated_,
                             " clients, its limit (max_connections; dp-run --store-limit connections=N)"));
        continue;  // closed by `owned`
      }
      net::set_nodelay(fd);
      const uint64_t id = next_id_++;
      auto c = std::make_unique<Connection>();
      c->fd = std::move(owned);
      c->peer = peer_address(fd);
      c->accepted = Clock::now();
      c->interest = EPOLLIN | EPOLLRDHUP;
      random_bytes(c->nonce, kNonceBytes);
      greet(*c);
      Connection& ref = *c;
      connections_.emplace(id, std::move(c));
      add_fd(fd, ref.interest, id);
      if (open_store()) {
        ref.authenticated = true;
        ++authenticated_;
      } else {
        unauthenticated_.insert(id);
      }
      if (!flush(ref)) close(id);
    }
  }

  // Makes room for one more connection in the handshake: closes the oldest one if it has had a fair
  // chance (a real client answers the greeting in milliseconds); else pauses accepting until it has.
  bool evict_oldest_unauthenticated() {
    const uint64_t oldest = *unauthenticated_.begin();
    Connection* c = find(oldest);
    const auto fair = std::min<Clock::duration>(o_.handshake_timeout, kFairHandshake);
    if (c != nullptr && Clock::now() - c->accepted < fair) {
      pause_accepting(c->accepted + fair);
      return false;
    }
    if (c != nullptr)
      log_once("*", "flood",
               detail::str("more than ", o_.max_unauthenticated, " connections were in the handshake at once (max_unauthenticated): the oldest ",
                           "are closed to make room (the first from ", c->peer, ")"));
    close(oldest);
    return true;
  }

  void pause_accepting(Clock::time_point until) {
    for (auto& l : listeners_) {
      epoll_event ev{};
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, l.get(), &ev);
    }
    accept_paused_until_ = until;
  }

  void resume_accepting() {
    if (!accept_paused_until_ || Clock::now() < *accept_paused_until_) return;
    accept_paused_until_.reset();
    for (size_t i = 0; i < listeners_.size(); ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kFirstListenerTag + i;
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listeners_[i].get(), &ev);
    }
  }

  void greet(Connection& c) {
    FrameWriter w(kHello, kHelloBody);
    w.u32(kMagic).u8(kVersion).u8(open_store() ? 0 : kFlagTokenRequired).raw(c.nonce, kNonceBytes);
    w.u32(static_cast<uint32_t>(o_.max_key_bytes)).u32(static_cast<uint32_t>(o_.max_value_bytes));
    w.u32(static_cast<uint32_t>(std::min<size_t>(o_.max_keys_per_request, UINT32_MAX)));
    w.u64(static_cast<uint64_t>(o_.max_wait.count()));
    answer(c, w.finish());
  }

  // Closes the connections that have not authenticated in time.
  void expire_handshakes() {
    const auto now = Clock::now();
    while (!unauthenticated_.empty()) {
      const uint64_t id = *unauthenticated_.begin();
      Connection* c = find(id);
      if (c == nullptr) {
        unauthenticated_.erase(unauthenticated_.begin());
        continue;
      }
      if (now - c->accepted < o_.handshake_timeout) break;
      log_once(c->peer, "timeout",
               detail::str("closed a connection from ", c->peer, ": it did not authenticate within ", o_.handshake_timeout.count(),
                           " ms (handshake_timeout)"));
      close(id);
    }
  }

  Connection* find(uint64_t id) {
    auto it = connections_.find(id);
    return it == connections_.end() ? nullptr : it->second.get();
  }
  const Connection* find_const(uint64_t id) const {
    auto it = connections_.find(id);
    return it == connections_.end() ? nullptr : it->second.get();
  }

  void handle(uint64_t id, uint32_t events) {
    Connection* c = find(id);
    if (c == nullptr) return;  // closed earlier in this batch
    bool keep = true;
    try {
      if (!c->authenticated) {
        keep = handshake(id, *c, events);
      } else {
        if (events & (EPOLLERR | EPOLLHUP)) {
          keep = false;
        } else if (events & EPOLLIN) {
          keep = read_some(*c);
        } else if (events & EPOLLRDHUP) {
          keep = false;  // the client left while its request was parked or its answer unsent
        }
        if (keep && (events & EPOLLOUT)) keep = flush(*c);
        if (keep) keep = advance(id, *c);
      }
    } catch (...) {
      keep = false;  // e.g. out of memory for a frame: lose this client, not the server
    }
    if (!keep) close(id);
  }

  // An unauthenticated connection: reads (at most) its one kAuth frame and checks it. False: close.
  bool handshake(uint64_t id, Connection& c, uint32_t events) {
    if (events & EPOLLOUT) {
      if (!flush(c)) return false;
    }
    if (!(events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))) return true;
    const size_t want = sizeof c.hs - c.hs_have;
    ssize_t n;
    do {
      n = ::recv(c.fd.get(), c.hs + c.hs_have, want, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      log_once(c.peer, "left",
               detail::str("a client from ", c.peer, " left without authenticating (a client without the job's token, or a port scan)"));
      return false;
    }
    c.hs_have += static_cast<size_t>(n);
    if (c.hs_have >= kHeaderBytes) {
      const uint8_t type = header_type(c.hs);
      if (type != kAuth) {
        log_once(c.peer, "early",
                 detail::str("refused a client from ", c.peer, ": it sent a '", command_name(type),
                             "' request before authenticating (no token, or a dparallel older than the authenticated store)"));
        return false;
      }
      if (header_length(c.hs) != kAuthBody) {
        log_once(c.peer, "malformed", detail::str("refused a client from ", c.peer, ": a malformed authentication frame"));
        return false;
      }
    }
    if (c.hs_have < sizeof c.hs) return true;
    const uint8_t* client_nonce = c.hs + kHeaderBytes;
    const uint8_t* client_tag = client_nonce + kNonceBytes;
    uint8_t expected[kTagBytes];
    handshake_tag(o_.token, kClientLabel, c.nonce, client_nonce, expected);
    const bool ok = tags_equal(expected, client_tag);
    OPENSSL_cleanse(expected, sizeof expected);
    if (!ok) {
      log_once(c.peer, "token", detail::str("refused a client from ", c.peer, ": wrong token (its proof of the job's token did not match)"));
      // Told, without detail, so a misconfigured client of the job fails at once instead of retrying.
      const Bytes denied = FrameWriter(kDenied).finish();
      [[maybe_unused]] ssize_t sent = ::send(c.fd.get(), denied.data(), denied.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      return false;
    }
    uint8_t proof[kTagBytes];
    handshake_tag(o_.token, kServerLabel, client_nonce, c.nonce, proof);
    answer(c, FrameWriter(kOk, kTagBytes).raw(proof, kTagBytes).finish());
    c.authenticated = true;
    unauthenticated_.erase(id);
    ++authenticated_;
    return advance(id, c);
  }

  // Reads what the socket has (up to kMaxRead). False when the client closed or failed.
  bool read_some(Connection& c) {
    size_t want = kReadChunk;
    const size_t have = c.in.size();
    if (have >= kHeaderBytes) {
      const size_t body = header_length(c.in.data());
      if (body > max_body_) return oversized(c, body);
      if (kHeaderBytes + body > have) want = std::max(want, std::min(kMaxRead, kHeaderBytes + body - have));
    }
    uint8_t* tail = c.in.tail(want);
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), tail, want, MSG_DONTWAIT);
      if (n > 0) {
        c.in.commit(static_cast<size_t>(n));
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }

  bool oversized(const Connection& c, size_t body) {
    log_once(c.peer, "frame",
             detail::str("closed a connection from ", c.peer, ": it sent a frame of ", body, " bytes, more than the ", max_body_,
                         " a request can need with max_key_bytes ", o_.max_key_bytes, " and max_value_bytes ", o_.max_value_bytes));
    return false;
  }

  // Sends what the socket takes. False when the client is gone.
  bool flush(Connection& c) {
    while (!c.out.empty()) {
      iovec iov[16];
      int count = 0;
      for (auto it = c.out.begin(); it != c.out.end() && count < 16; ++it, ++count) {
        iov[count].iov_base = const_cast<uint8_t*>(it->data());
        iov[count].iov_len = it->size();
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      const ssize_t n = ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) return false;
      size_t sent = static_cast<size_t>(n);
      c.out_bytes -= sent;
      while (sent > 0) {
        OutSegment& front = c.out.front();
        const size_t take = std::min(sent, front.size());
        front.offset += take;
        sent -= take;
        if (front.size() == 0) c.out.pop_front();
      }
    }
    return true;
  }

  bool has_frame(const Connection& c) const {
    const size_t have = c.in.size();
    return have >= kHeaderBytes && have >= kHeaderBytes + header_length(c.in.data());
  }

  // Serves the buffered requests (until one parks), sends, and registers what to wait for next.
  bool advance(uint64_t id, Connection& c) {
    for (;;) {
      while (!c.parked && c.out_pending() < kOutputHighWater && c.in.size() >= kHeaderBytes) {
        const uint8_t* frame = c.in.data();
        const size_t body = header_length(frame);
        if (body > max_body_) return oversized(c, body);
        if (c.in.size() < kHeaderBytes + body) break;
        const bool ok = execute(id, c, header_type(frame), frame + kHeaderBytes, body);
        c.in.consume(kHeaderBytes + body);  // after execute: the request's bytes live in the buffer
        if (!ok) {
          log_once(c.peer, "request",
                   detail::str("closed a connection from ", c.peer, ": a malformed '", command_name(header_type(frame)), "' request"));
          return false;
        }
      }
      if (!flush(c)) return false;
      // Sending may have made room for more of a client's pipelined requests.
      if (c.parked || c.out_pending() >= kOutputHighWater || !has_frame(c)) break;
    }
    uint32_t want = EPOLLRDHUP;
    if (!c.parked && c.out_pending() < kOutputHighWater) want |= EPOLLIN;
    if (c.out_pending() > 0) want |= EPOLLOUT;
    if (want != c.interest) {
      epoll_event ev{};
      ev.events = want;
      ev.data.u64 = id;
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
      c.interest = want;
    }
    return true;
  }

  void close(uint64_t id) {
    Connection* c = find(id);
    if (c == nullptr) return;
    if (c->parked) unpark(id, *c);
    if (c->authenticated)
      --authenticated_;
    else
      unauthenticated_.erase(id);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
    connections_.erase(id);
  }

  // Connections answered by another's write, or by a timeout: served further (pipelined requests),
  // flushed and re-registered here, outside the request that woke them.
  void drain_touched() {
    while (!touched_.empty()) {
      const uint64_t id = touched_.back();
      touched_.pop_back();
      Connection* c = find(id);
      if (c == nullptr) continue;
      bool keep;
      try {
        keep = advance(id, *c);
      } catch (...) {
        keep = false;
      }
      if (!keep) close(id);
    }
  }

  // --- requests -------------------------------------------------------------------------------

  static void answer(Connection& c, Bytes frame) {
    c.out_bytes += frame.size();
    OutSegment seg;
    seg.owned = std::move(frame);
    c.out.push_back(std::move(seg));
  }

  // An answer whose body is one value: the header and length owned, the value shared.
  static void answer_value(Connection& c, const std::shared_ptr<const Bytes>& value) {
    const size_t n = value->size();
    Bytes head(kHeaderBytes + 4);
    head[0] = kOk;
    const uint32_t body = static_cast<uint32_t>(n + 4);
    for (int i = 0; i < 4; ++i) head[1 + i] = static_cast<uint8_t>(body >> (8 * i));
    for (int i = 0; i < 4; ++i) head[5 + i] = static_cast<uint8_t>(static_cast<uint32_t>(n) >> (8 * i));
    answer(c, std::move(head));
    if (n == 0) return;
    OutSegment seg;
    seg.shared = value;
    c.out_bytes += n;
    c.out.push_back(std::move(seg));
  }

  static void refuse(Connection& c, const std::string& message) { answer(c, FrameWriter(kLimit, message.size() + 8).bytes(message).finish()); }

  // A key or value over the configured limits: the answer names the limit. False: within them.
  bool over_limits(Connection& c, const char* op, const std::string& key, const std::vector<const Bytes*>& values) {
    if (key.size() > o_.max_key_bytes) {
      refuse(c, detail::str(op, ": a key of ", key.size(), " bytes is longer than the store's limit of ", bytes_text(o_.max_key_bytes),
                            " (max_key_bytes; dp-run --store-limit key-bytes=N)"));
      return true;
    }
    for (const Bytes* v : values) {
      if (v->size() > o_.max_value_bytes) {
        refuse(c, detail::str(op, ": a value of ", v->size(), " bytes is larger than the store's limit of ", bytes_text(o_.max_value_bytes),
                              " (max_value_bytes; dp-run --store-limit value-bytes=N)"));
        return true;
      }
    }
    return false;
  }

  // Whether replacing `key`'s value by one of `size` bytes keeps the store within its quota; if not,
  // the refusal is answered.
  bool fits_quota(Connection& c, const char* op, const std::string& key, size_t size) {
    auto it = data_.find(key);
    const size_t old = it == data_.end() ? 0 : key.size() + it->second->size();
    const size_t after = total_bytes_ - old + key.size() + size;
    if (after <= o_.max_total_bytes) return true;
    refuse(c, detail::str(op, " of key '", key.substr(0, 200), "': the store holds ", total_bytes_, " bytes of keys and values and this would make ",
                          after, ", over its quota of ", bytes_text(o_.max_total_bytes), " (max_total_bytes; dp-run --store-limit total-bytes=N)"));
    return false;
  }

  void store_value(const std::string& key, std::shared_ptr<const Bytes> value) {
    auto it = data_.find(key);
    if (it != data_.end()) {
      total_bytes_ -= key.size() + it->second->size();
      total_bytes_ += key.size() + value->size();
      it->second = std::move(value);
    } else {
      total_bytes_ += key.size() + value->size();
      data_.emplace(key, std::move(value));
    }
  }

  bool too_many_keys(Connection& c, const char* op, const BodyReader& r) {
    if (!r.count_exceeded()) return false;
    refuse(c, detail::str(op, ": ", r.last_count(), " keys in one request, more than the store's limit of ", o_.max_keys_per_request,
                          " (max_keys_per_request; dp-run --store-limit keys-per-request=N)"));
    return true;
  }

  // Runs one request; false when it is malformed (the connection is then closed).
  bool execute(uint64_t id, Connection& c, uint8_t command, const uint8_t* body, size_t size) {
    BodyReader r(body, size);
    switch (command) {
      case kSet: {
        std::string key = r.string(kMaxKeyBytesCap);
        Bytes value = r.bytes(kMaxValueBytesCap);
        if (!r.ok()) return false;
        if (over_limits(c, "set", key, {&value}) || !fits_quota(c, "set", key, value.size())) return true;
        store_value(key, std::make_shared<const Bytes>(std::move(value)));
        answer(c, FrameWriter(kOk).finish());
        wrote(key);
        return true;
      }
      case kGet: {
        std::string key = r.string(kMaxKeyBytesCap);
        const uint64_t timeout_ms = r.u64();
        if (!r.ok()) return false;
        if (over_limits(c, "get", key, {})) return true;
        park(id, c, kGet, {std::move(key)}, timeout_ms);
        return true;
      }
      case kAdd: {
        std::string key = r.string(kMaxKeyBytesCap);
        const int64_t delta = r.i64();
        if (!r.ok()) return false;
        if (over_limits(c, "add", key, {})) return true;
        add(c, key, delta);
        return true;
      }
      case kCompareSet: {
        std::string key = r.string(kMaxKeyBytesCap);
        Bytes expected = r.bytes(kMaxValueBytesCap);
        Bytes desired = r.bytes(kMaxValueBytesCap);
        if (!r.ok()) return false;
        if (over_limits(c, "compare_set", key, {&expected, &desired})) return true;
        compare_set(c, key, expected, std::move(desired));
        return true;
      }
      case kCheck: {
        std::vector<std::string> keys = r.strings(kMaxKeyBytesCap, o_.max_keys_per_request);
        if (too_many_keys(c, "check", r)) return true;
        if (!r.ok()) return false;
        answer(c, FrameWriter(kOk).u8(first_missing(keys, 0) == keys.size() ? 1 : 0).finish());
        return true;
      }
      case kWait: {
        std::vector<std::string> keys = r.strings(kMaxKeyBytesCap, o_.max_keys_per_request);
        if (too_many_keys(c, "wait", r)) return true;
        const uint64_t timeout_ms = r.u64();
        if (!r.ok()) return false;
        park(id, c, kWait, std::move(keys), timeout_ms);
        return true;
      }
      case kDelete: {
        std::string key = r.string(kMaxKeyBytesCap);
        if (!r.ok()) return false;
        auto it = data_.find(key);
        const bool existed = it != data_.end();
        if (existed) {
          total_bytes_ -= key.size() + it->second->size();
          data_.erase(it);
        }
        answer(c, FrameWriter(kOk).u8(existed ? 1 : 0).finish());
        return true;
      }
      case kNumKeys:
        if (!r.ok()) return false;
        answer(c, FrameWriter(kOk).i64(static_cast<int64_t>(data_.size())).finish());
        return true;
      default:
        return false;
    }
  }

  void add(Connection& c, const std::string& key, int64_t delta) {
    auto it = data_.find(key);
    int64_t now = 0;
    try {
      now = it == data_.end() ? 0 : parse_counter(key, *it->second);
    } catch (const Error& e) {
      answer(c, FrameWriter(kBadValue).bytes(std::string(e.what())).finish());
      return;
    }
    int64_t sum;
    if (__builtin_add_overflow(now, delta, &sum)) {
      answer(c,
             FrameWriter(kBadValue).bytes(detail::str("Store::add: key '", key, "' holds ", now, "; adding ", delta, " overflows int64")).finish());
      return;
    }
    Bytes value = counter_bytes(sum);
    if (!fits_quota(c, "add", key, value.size())) return;
    store_value(key, std::make_shared<const Bytes>(std::move(value)));
    answer(c, FrameWriter(kOk).i64(sum).finish());
    wrote(key);
  }

  // As HashStore::compare_set.
  void compare_set(Connection& c, const std::string& key, const Bytes& expected, Bytes desired) {
    auto it = data_.find(key);
    if (it == data_.end() && !expected.empty()) {
      answer(c, FrameWriter(kOk, expected.size() + 8).bytes(expected).finish());
      return;
    }
    if (it != data_.end() && *it->second != expected) {
      answer_value(c, it->second);
      return;
    }
    if (!fits_quota(c, "compare_set", key, desired.size())) return;
    auto value = std::make_shared<const Bytes>(std::move(desired));
    store_value(key, value);
    answer_value(c, value);
    wrote(key);
  }

  // The index of the first key from `from` on that does not exist (keys.size() when all do).
  size_t first_missing(const std::vector<std::string>& keys, size_t from) const {
    for (size_t i = from; i < keys.size(); ++i)
      if (!data_.count(keys[i])) return i;
    return keys.size();
  }

  // Answers a get/wait whose keys all exist.
  void answer_ready(Connection& c, uint8_t command, const std::vector<std::string>& keys) {
    if (command == kGet)
      answer_value(c, data_.at(keys[0]));
    else
      answer(c, FrameWriter(kOk).finish());
  }

  void park(uint64_t id, Connection& c, uint8_t command, std::vector<std::string> keys, uint64_t timeout_ms) {
    const size_t missing = first_missing(keys, 0);
    if (missing == keys.size()) {
      answer_ready(c, command, keys);
      return;
    }
    if (parked_keys_ + keys.size() > o_.max_parked_keys) {
      refuse(c, detail::str(command_name(command), ": the requests waiting in the store wait for ", parked_keys_, " keys, and ", keys.size(),
                            " more would exceed its limit of ", o_.max_parked_keys, " (max_parked_keys; dp-run --store-limit parked-keys=N)"));
      return;
    }
    const uint64_t max_wait = static_cast<uint64_t>(std::max<int64_t>(0, o_.max_wait.count()));
    c.parked = true;
    c.parked_command = command;
    c.cursor = missing;
    c.parked_keys = std::move(keys);
    parked_keys_ += c.parked_keys.size();
    c.deadline = Clock::now() + std::chrono::milliseconds(std::min({timeout_ms, max_wait, kMaxTimeoutMs}));
    c.accepted_wait = Clock::now();
    watchers_[c.parked_keys[c.cursor]].push_back(id);
    deadlines_.emplace(c.deadline, id);
  }

  void unpark(uint64_t id, Connection& c, bool in_watchers = true) {
    auto it = in_watchers && c.cursor < c.parked_keys.size() ? watchers_.find(c.parked_keys[c.cursor]) : watchers_.end();
    if (it != watchers_.end()) {
      auto& ids = it->second;
      ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
      if (ids.empty()) watchers_.erase(it);
    }
    deadlines_.erase({c.deadline, id});
    parked_keys_ -= c.parked_keys.size();
    c.parked = false;
    c.parked_keys.clear();
    c.cursor = 0;
  }

  // `key` was written: the requests parked on it move on to their next missing key, or are answered.
  // Each keeps a cursor, so a long key list is walked once, not from its start on every write; at
  // its end the whole list is checked once more (a key may have been deleted meanwhile).
  void wrote(const std::string& key) {
    auto it = watchers_.find(key);
    if (it == watchers_.end()) return;
    std::vector<uint64_t> ids = std::move(it->second);
    watchers_.erase(it);
    for (uint64_t id : ids) {
      Connection* c = find(id);
      if (c == nullptr || !c->parked) continue;
      size_t next = first_missing(c->parked_keys, c->cursor);
      if (next == c->parked_keys.size()) next = first_missing(c->parked_keys, 0);
      if (next < c->parked_keys.size()) {
        c->cursor = next;
        watchers_[c->parked_keys[next]].push_back(id);
        continue;
      }
      std::vector<std::string> keys = std::move(c->parked_keys);
      const uint8_t command = c->parked_command;
      c->parked_keys = {};
      parked_keys_ -= keys.size();
      c->cursor = 0;
      deadlines_.erase({c->deadline, id});
      c->parked = false;  // `ids` was its watcher list
      answer_ready(*c, command, keys);
      touched_.push_back(id);
    }
  }

  void expire_parked() {
    const auto now = Clock::now();
    while (!deadlines_.empty() && std::get<0>(*deadlines_.begin()) <= now) {
      const uint64_t id = std::get<1>(*deadlines_.begin());
      Connection* c = find(id);
      if (c == nullptr || !c->parked) {  // not expected: parked entries leave with their connection
        deadlines_.erase(deadlines_.begin());
        continue;
      }
      std::vector<std::string> missing;
      for (const auto& k : c->parked_keys)
        if (!data_.count(k)) missing.push_back(k);
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - c->accepted_wait).count();
      unpark(id, *c);
      answer(*c, FrameWriter(kTimeout).keys(missing).u64(static_cast<uint64_t>(std::max<int64_t>(0, waited))).finish());
      touched_.push_back(id);
    }
  }

  static constexpr size_t kMaxLogged = 4096;
  // A connection in the handshake has this long before a newer one may push it out (a client of the
  // job answers the greeting in well under a millisecond; one pushed out connects again).
  static constexpr std::chrono::milliseconds kFairHandshake{100};

  std::vector<net::Fd> listeners_;
  std::atomic<bool>* stop_;
  TCPStoreServerOptions o_;
  size_t max_body_ = 0;
  net::Fd epoll_;
  net::Fd wake_;
  std::optional<Clock::time_point> accept_paused_until_;
  uint64_t next_id_ = kFirstConnectionTag;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::set<uint64_t> unauthenticated_;  // by id, which is accept order: the oldest first
  size_t authenticated_ = 0;
  std::unordered_map<std::string, std::shared_ptr<const Bytes>> data_;
  size_t total_bytes_ = 0;                                           // keys and values in data_
  size_t parked_keys_ = 0;                                           // keys of every parked request
  std::unordered_map<std::string, std::vector<uint64_t>> watchers_;  // missing key -> parked connections
  std::set<std::tuple<Clock::time_point, uint64_t>> deadlines_;      // parked connections by deadline
  std::vector<uint64_t> touched_;
  std::set<std::string> logged_;
  bool log_full_ = false;
};

}  // namespace

struct TCPStoreServer::State {
  uint16_t port = 0;
  std::atomic<bool> stop{false};
  std::unique_ptr<ServerLoop> loop;
  std::thread thread;
};

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port, TCPStoreServerOptions options) : state_(std::make_unique<State>()) {
  check_server_options(options);
  std::vector<net::Fd> listeners = listen_on(host, port, &state_->port);
  state_->loop = std::make_unique<ServerLoop>(std::move(listeners), &state_->stop, std::move(options));
  state_->thread = std::thread([loop = state_->loop.get()] { loop->run(); });
}

TCPStoreServer::~TCPStoreServer() {
  state_->stop.store(true);
  state_->loop->wake();
  state_->thread.join();
  // The loop's destructor closes the listeners and every connection: waiting clients see EOF.
}

uint16_t TCPStoreServer::port() const { return state_->port; }

}  // namespace dp::distributed
