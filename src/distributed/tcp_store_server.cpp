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
#include <algorithm>
#include <atomic>
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

// Stop reading a connection's requests while this much of its answers is unsent: a client that
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

struct Connection {
  net::Fd fd;
  InBuffer in;
  Bytes out;  // unsent bytes: out[out_start, out.size())
  size_t out_start = 0;
  uint32_t interest = 0;  // the epoll events registered now
  // A parked get (one key) or wait: answered when every key exists, or at the deadline.
  bool parked = false;
  uint8_t parked_command = 0;
  std::vector<std::string> parked_keys;
  std::string watched_key;  // the missing key whose write wakes it
  Clock::time_point deadline;

  size_t out_pending() const { return out.size() - out_start; }
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

// The server's state; touched only by its thread (after construction).
class ServerLoop {
 public:
  ServerLoop(std::vector<net::Fd> listeners, std::atomic<bool>* stop) : listeners_(std::move(listeners)), stop_(stop) {
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!epoll_.valid() || !wake_.valid()) {
      const int err = errno;
      throw StoreError("TCPStoreServer: cannot create its epoll/eventfd descriptors: " + net::errno_text(err));
    }
    add_fd(wake_.get(), EPOLLIN, kWakeTag);
    for (size_t i = 0; i < listeners_.size(); ++i) add_fd(listeners_[i].get(), EPOLLIN, kFirstListenerTag + i);
  }

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
  void add_fd(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  }

  int next_timeout_ms() const {
    std::optional<Clock::time_point> next;
    if (!deadlines_.empty()) next = std::get<0>(*deadlines_.begin());
    if (accept_paused_until_ && (!next || *accept_paused_until_ < *next)) next = accept_paused_until_;
    return next ? net::poll_timeout_ms(*next) : -1;
  }

  void accept_all(size_t listener) {
    // Bounded per wake-up so a connection storm does not starve the connected clients.
    for (int i = 0; i < 256; ++i) {
      const int fd = ::accept4(listeners_[listener].get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) pause_accepting();
        return;
      }
      net::set_nodelay(fd);
      const uint64_t id = next_id_++;
      auto c = std::make_unique<Connection>();
      c->fd.reset(fd);
      c->interest = EPOLLIN | EPOLLRDHUP;
      add_fd(fd, c->interest, id);
      connections_.emplace(id, std::move(c));
    }
  }

  void pause_accepting() {
    for (auto& l : listeners_) {
      epoll_event ev{};
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, l.get(), &ev);
    }
    accept_paused_until_ = Clock::now() + kAcceptPause;
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

  Connection* find(uint64_t id) {
    auto it = connections_.find(id);
    return it == connections_.end() ? nullptr : it->second.get();
  }

  void handle(uint64_t id, uint32_t events) {
    Connection* c = find(id);
    if (c == nullptr) return;  // closed earlier in this batch
    bool keep = true;
    try {
      if (events & (EPOLLERR | EPOLLHUP)) {
        keep = false;
      } else if (events & EPOLLIN) {
        keep = read_some(*c);
      } else if (events & EPOLLRDHUP) {
        keep = false;  // the client left while its request was parked or its answer unsent
      }
      if (keep && (events & EPOLLOUT)) keep = flush(*c);
      if (keep) keep = advance(id, *c);
    } catch (...) {
      keep = false;  // e.g. out of memory for a frame: lose this client, not the server
    }
    if (!keep) close(id);
  }

  // Reads what the socket has (up to kMaxRead). False when the client closed or failed.
  bool read_some(Connection& c) {
    size_t want = kReadChunk;
    const size_t have = c.in.size();
    if (have >= kHeaderBytes) {
      const size_t body = header_length(c.in.data());
      if (body > kMaxBodyBytes) return false;
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

  // Sends what the socket takes. False when the client is gone.
  bool flush(Connection& c) {
    while (c.out_pending() > 0) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_start, c.out_pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_start += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
    if (c.out_pending() == 0) {
      c.out.clear();
      c.out_start = 0;
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
        if (body > kMaxBodyBytes) return false;
        if (c.in.size() < kHeaderBytes + body) break;
        const bool ok = execute(id, c, header_type(frame), frame + kHeaderBytes, body);
        c.in.consume(kHeaderBytes + body);  // after execute: the request's bytes live in the buffer
        if (!ok) return false;
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
    if (c.out.empty())
      c.out = std::move(frame);  // the common case: no copy of a large value
    else
      c.out.insert(c.out.end(), frame.begin(), frame.end());
  }

  // Runs one request; false when it is malformed (the connection is then closed).
  bool execute(uint64_t id, Connection& c, uint8_t command, const uint8_t* body, size_t size) {
    BodyReader r(body, size);
    switch (command) {
      case kHello: {
        const uint32_t magic = r.u32();
        r.u8();  // the client's version: it checks ours
        if (!r.ok() || magic != kMagic) return false;
        answer(c, FrameWriter(kOk).u32(kMagic).u8(kVersion).finish());
        return true;
      }
      case kSet: {
        std::string key = r.string(kMaxKeyBytes);
        Bytes value = r.bytes(kMaxValueBytes);
        if (!r.ok()) return false;
        data_[key] = std::move(value);
        answer(c, FrameWriter(kOk).finish());
        wrote(key);
        return true;
      }
      case kGet: {
        std::string key = r.string(kMaxKeyBytes);
        const uint64_t timeout_ms = r.u64();
        if (!r.ok()) return false;
        park(id, c, kGet, {std::move(key)}, timeout_ms);
        return true;
      }
      case kAdd: {
        std::string key = r.string(kMaxKeyBytes);
        const int64_t delta = r.i64();
        if (!r.ok()) return false;
        add(c, key, delta);
        return true;
      }
      case kCompareSet: {
        std::string key = r.string(kMaxKeyBytes);
        Bytes expected = r.bytes(kMaxValueBytes);
        Bytes desired = r.bytes(kMaxValueBytes);
        if (!r.ok()) return false;
        compare_set(c, key, expected, std::move(desired));
        return true;
      }
      case kCheck: {
        std::vector<std::string> keys = r.strings(kMaxKeyBytes);
        if (!r.ok()) return false;
        answer(c, FrameWriter(kOk).u8(first_missing(keys) == nullptr ? 1 : 0).finish());
        return true;
      }
      case kWait: {
        std::vector<std::string> keys = r.strings(kMaxKeyBytes);
        const uint64_t timeout_ms = r.u64();
        if (!r.ok()) return false;
        park(id, c, kWait, std::move(keys), timeout_ms);
        return true;
      }
      case kDelete: {
        std::string key = r.string(kMaxKeyBytes);
        if (!r.ok()) return false;
        answer(c, FrameWriter(kOk).u8(data_.erase(key) > 0 ? 1 : 0).finish());
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
      now = it == data_.end() ? 0 : parse_counter(key, it->second);
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
    data_[key] = counter_bytes(sum);
    answer(c, FrameWriter(kOk).i64(sum).finish());
    wrote(key);
  }

  // As HashStore::compare_set.
  void compare_set(Connection& c, const std::string& key, const Bytes& expected, Bytes desired) {
    auto it = data_.find(key);
    if (it == data_.end() && !expected.empty()) {
      answer(c, FrameWriter(kOk).bytes(expected).finish());
      return;
    }
    if (it != data_.end() && it->second != expected) {
      answer(c, FrameWriter(kOk).bytes(it->second).finish());
      return;
    }
    answer(c, FrameWriter(kOk, desired.size() + 8).bytes(desired).finish());
    data_[key] = std::move(desired);
    wrote(key);
  }

  const std::string* first_missing(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data_.count(k)) return &k;
    return nullptr;
  }

  // Answers a get/wait whose keys all exist.
  void answer_ready(Connection& c, uint8_t command, const std::vector<std::string>& keys) {
    if (command == kGet) {
      const Bytes& v = data_.at(keys[0]);
      answer(c, FrameWriter(kOk, v.size() + 8).bytes(v).finish());
    } else {
      answer(c, FrameWriter(kOk).finish());
    }
  }

  void park(uint64_t id, Connection& c, uint8_t command, std::vector<std::string> keys, uint64_t timeout_ms) {
    const std::string* missing = first_missing(keys);
    if (missing == nullptr) {
      answer_ready(c, command, keys);
      return;
    }
    c.parked = true;
    c.parked_command = command;
    c.watched_key = *missing;
    c.parked_keys = std::move(keys);
    c.deadline = Clock::now() + std::chrono::milliseconds(std::min(timeout_ms, kMaxTimeoutMs));
    watchers_[c.watched_key].push_back(id);
    deadlines_.emplace(c.deadline, id);
  }

  void unpark(uint64_t id, Connection& c, bool in_watchers = true) {
    auto it = in_watchers ? watchers_.find(c.watched_key) : watchers_.end();
    if (it != watchers_.end()) {
      auto& ids = it->second;
      ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
      if (ids.empty()) watchers_.erase(it);
    }
    deadlines_.erase({c.deadline, id});
    c.parked = false;
    c.parked_keys.clear();
    c.watched_key.clear();
  }

  // `key` was written: the requests parked on it move on to their next missing key, or are answered.
  void wrote(const std::string& key) {
    auto it = watchers_.find(key);
    if (it == watchers_.end()) return;
    std::vector<uint64_t> ids = std::move(it->second);
    watchers_.erase(it);
    for (uint64_t id : ids) {
      Connection* c = find(id);
      if (c == nullptr || !c->parked) continue;
      if (const std::string* missing = first_missing(c->parked_keys)) {
        c->watched_key = *missing;
        watchers_[*missing].push_back(id);
        continue;
      }
      std::vector<std::string> keys = std::move(c->parked_keys);
      const uint8_t command = c->parked_command;
      unpark(id, *c, /*in_watchers=*/false);  // `ids` was its watcher list
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
      unpark(id, *c);
      answer(*c, FrameWriter(kTimeout).keys(missing).finish());
      touched_.push_back(id);
    }
  }

  std::vector<net::Fd> listeners_;
  std::atomic<bool>* stop_;
  net::Fd epoll_;
  net::Fd wake_;
  std::optional<Clock::time_point> accept_paused_until_;
  uint64_t next_id_ = kFirstConnectionTag;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<std::string, std::vector<uint64_t>> watchers_;  // missing key -> parked connections
  std::set<std::tuple<Clock::time_point, uint64_t>> deadlines_;      // parked connections by deadline
  std::vector<uint64_t> touched_;
};

}  // namespace

struct TCPStoreServer::State {
  uint16_t port = 0;
  std::atomic<bool> stop{false};
  std::unique_ptr<ServerLoop> loop;
  std::thread thread;
};

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port) : state_(std::make_unique<State>()) {
  std::vector<net::Fd> listeners = listen_on(host, port, &state_->port);
  state_->loop = std::make_unique<ServerLoop>(std::move(listeners), &state_->stop);
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
