// TCPStore: the client. One connection, one request at a time (a mutex), every wait bounded: the
// server times get/wait itself and answers with the missing keys; the client waits that long plus
// a grace period, so a wedged server is a StoreTimeout, not a hang, and a closed connection is a
// StoreError naming host:port at once.
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <algorithm>
#include <mutex>
#include <thread>
#include "distributed/socket.h"
#include "distributed/store_common.h"
#include "distributed/tcp_store_protocol.h"
#include "dp/distributed/store.h"

namespace dp::distributed {

namespace {

using namespace tcp_store;
using net::Clock;
using std::chrono::milliseconds;

// How long past a get/wait's own timeout the client waits for the server's timeout answer.
constexpr milliseconds kServerGrace{2000};
// Connection retries: the first after 5 ms, doubling up to 100 ms; one attempt waits at most 1 s
// when the name has several addresses (so one that drops packets does not hide the others).
constexpr milliseconds kFirstRetry{5};
constexpr milliseconds kMaxRetry{100};
constexpr milliseconds kMaxAttempt{1000};

// Where a client connects for a server that listens on every interface: this machine.
std::string connectable_host(const std::string& host) {
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s;
}

// One non-blocking connect to `address`, waiting until `deadline`. 0 or the errno.
int connect_once(const net::Address& address, Clock::time_point deadline, net::Fd* out) {
  net::Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  if (::connect(fd.get(), address.get(), address.length) != 0) {
    if (errno != EINPROGRESS) return errno;
    for (;;) {
      pollfd p{fd.get(), POLLOUT, 0};
      const int r = ::poll(&p, 1, net::poll_timeout_ms(deadline));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return ETIMEDOUT;
      break;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    if (err != 0) return err;
  }
  net::set_nodelay(fd.get());
  *out = std::move(fd);
  return 0;
}

enum class Handshake { kOk, kRetry, kNotAStore };

// Checks that the peer speaks this protocol (a port that belongs to another program fails here,
// not at the first request).
Handshake handshake(int fd, Clock::time_point deadline, std::string* why) {
  const Bytes hello = FrameWriter(kHello).u32(kMagic).u8(kVersion).finish();
  uint8_t header[kHeaderBytes];
  int err = 0;
  auto io = net::send_all(fd, hello.data(), hello.size(), deadline, &err);
  if (io == net::IoResult::kDone) io = net::recv_all(fd, header, sizeof header, deadline, &err);
  if (io == net::IoResult::kTimedOut) {
    *why = "it accepted the connection but did not answer the TCPStore handshake (is it a TCPStore server?)";
    return Handshake::kNotAStore;
  }
  if (io == net::IoResult::kClosed) {
    *why = "it closed the connection during the handshake" + (err ? " (" + net::errno_text(err) + ")" : std::string());
    return Handshake::kRetry;
  }
  const uint32_t n = header_length(header);
  uint8_t body[5];
  if (header_type(header) != kOk || n != sizeof body || net::recv_all(fd, body, sizeof body, deadline, &err) != net::IoResult::kDone) {
    *why = "it answered the handshake with something else (it is not a TCPStore server)";
    return Handshake::kNotAStore;
  }
  BodyReader r(body, sizeof body);
  const uint32_t magic = r.u32();
  const uint8_t version = r.u8();
  if (magic != kMagic || version != kVersion) {
    *why = detail::str("it is not a TCPStore server of this version (magic ", magic, ", version ", int(version), "; expected ", kMagic, ", ",
                       int(kVersion), ")");
    return Handshake::kNotAStore;
  }
  return Handshake::kOk;
}

}  // namespace

struct TCPStore::State {
  // Declared first, destroyed last: the client's connection closes before its own server stops.
  std::unique_ptr<TCPStoreServer> server;
  std::string connect_host;
  uint16_t port = 0;
  std::string where;  // "host:port" in messages
  std::mutex mu;      // one request at a time on the connection
  net::Fd fd;         // invalid after a timeout (the answer may still come: reconnect) or a loss
  std::string lost;   // set when the server went away: every later request fails with it

  // Connects (retrying until `deadline`: the server may not be up yet) and shakes hands.
  void connect(Clock::time_point deadline, milliseconds timeout) {
    std::string last_error = "no attempt finished";
    milliseconds backoff = kFirstRetry;
    for (;;) {
      int gai = 0;
      // Retried as well: a cluster's name for rank 0 may appear only once rank 0's machine is up.
      const std::vector<net::Address> addresses = net::resolve(connect_host, port, false, &gai);
      if (gai != 0) last_error = detail::str("the host name does not resolve (", ::gai_strerror(gai), ")");
      for (const auto& a : addresses) {
        auto attempt_deadline = deadline;
        if (addresses.size() > 1) attempt_deadline = std::min(deadline, Clock::now() + kMaxAttempt);
        net::Fd candidate;
        const int err = connect_once(a, attempt_deadline, &candidate);
        if (err != 0) {
          last_error = net::numeric_host(a) + ": " + net::errno_text(err);
          continue;
        }
        std::string why;
        // The handshake gets at least a second even when the connection came at the last moment.
        const Handshake h = handshake(candidate.get(), std::max(deadline, Clock::now() + milliseconds(1000)), &why);
        if (h == Handshake::kOk) {
          fd = std::move(candidate);
          return;
        }
        if (h == Handshake::kNotAStore) throw StoreError(detail::str("TCPStore: the program at ", where, " is not usable: ", why));
        last_error = why;
      }
      const auto now = Clock::now();
      if (now >= deadline)
        throw StoreError(detail::str("TCPStore: could not connect to the server at ", where, " within ", timeout.count(),
                                     " ms (last error: ", last_error, "); is the store server (rank 0 or the launcher) running and reachable?"));
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, kMaxRetry);
    }
  }

  [[noreturn]] void lose(const std::string& reason) {
    fd.reset();
    lost = reason;
    throw StoreError(reason);
  }

  // Sends one request frame and returns the answer's status and body. The caller holds mu.
  // `op` and `keys` name the request in errors; `deadline` bounds the whole exchange.
  uint8_t exchange(const Bytes& frame, const char* op, const std::vector<std::string>& keys, Clock::time_point deadline, milliseconds timeout,
                   Bytes* body) {
    if (!lost.empty())
      throw StoreError(detail::str("TCPStore: cannot run ", op, ": the connection to the server at ", where, " was lost earlier (", lost, ")"));
    if (!fd.valid()) connect(deadline, timeout);
    const std::string what = keys.empty() ? std::string(op) : std::string(op) + " of key(s) " + quoted_keys(keys);
    int err = 0;
    uint8_t header[kHeaderBytes];
    auto io = net::send_all(fd.get(), frame.data(), frame.size(), deadline, &err);
    if (io == net::IoResult::kDone) io = net::recv_all(fd.get(), header, sizeof header, deadline, &err);
    size_t size = 0;
    if (io == net::IoResult::kDone) {
      size = header_length(header);
      if (size > kMaxBodyBytes) lose(detail::str("TCPStore: the server at ", where, " sent a malformed answer to ", what));
      body->resize(size);
      io = net::recv_all(fd.get(), body->data(), size, deadline, &err);
    }
    if (io == net::IoResult::kTimedOut) {
      // The answer may still come and would be taken for the next one's: start a new connection.
      fd.reset();
      throw StoreTimeout(detail::str("TCPStore ", where, ": no answer from the server to ", what, " within ", timeout.count(),
                                     " ms (the server is overloaded or stopped)"),
                         keys);
    }
    if (io == net::IoResult::kClosed)
      lose(detail::str("TCPStore: lost the connection to the server at ", where, " during ", what, " (",
                       err ? net::errno_text(err) : std::string("closed by the server"),
                       "); the store server (rank 0 or the launcher) has stopped or failed"));
    return header_type(header);
  }

  [[noreturn]] void malformed(const char* op) { lose(detail::str("TCPStore: the server at ", where, " sent a malformed answer to ", op)); }
};

namespace {

void check_key(const std::string& key, const char* op) {
  DP_CHECK(key.size() <= kMaxKeyBytes, ValueError, "TCPStore::", op, ": a key of ", key.size(), " bytes is longer than the ", kMaxKeyBytes >> 10,
           " KiB limit");
}
void check_value(const Bytes& value, const std::string& key, const char* op) {
  DP_CHECK(value.size() <= kMaxValueBytes, ValueError, "TCPStore::", op, ": the value of key '", key, "' (", value.size(),
           " bytes) is larger than the ", kMaxValueBytes >> 20, " MiB limit");
}
void check_keys(const std::vector<std::string>& keys, const char* op) {
  for (const auto& k : keys) check_key(k, op);
}
uint64_t timeout_field(milliseconds t) { return t.count() < 0 ? 0 : static_cast<uint64_t>(t.count()); }

}  // namespace

TCPStore::TCPStore(std::string host, uint16_t port, TCPStoreOptions options)
    : Store(options.timeout), host_(std::move(host)), state_(std::make_unique<State>()) {
  const auto deadline = net::deadline_after(options.timeout);
  if (options.is_server) state_->server = std::make_unique<TCPStoreServer>(host_, port);
  state_->port = state_->server ? state_->server->port() : port;
  state_->connect_host = connectable_host(host_);
  state_->where = net::endpoint(state_->connect_host, state_->port);
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->connect(deadline, options.timeout);
}

TCPStore::~TCPStore() = default;

uint16_t TCPStore::port() const { return state_->port; }

void TCPStore::set(const std::string& key, const Bytes& value) {
  check_key(key, "set");
  check_value(value, key, "set");
  Bytes frame = FrameWriter(kSet, key.size() + value.size() + 8).bytes(key).bytes(value).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "set", {key}, net::deadline_after(timeout()), timeout(), &body);
  if (status != kOk || !body.empty()) state_->malformed("set");
}

Bytes TCPStore::get(const std::string& key) {
  check_key(key, "get");
  const milliseconds t = timeout();
  Bytes frame = FrameWriter(kGet).bytes(key).u64(timeout_field(t)).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "get", {key}, net::deadline_after(t + kServerGrace), t, &body);
  BodyReader r(body.data(), body.size());
  if (status == kTimeout) {
    std::vector<std::string> missing = r.strings(kMaxKeyBytes);
    if (!r.ok()) state_->malformed("get");
    throw_store_timeout("TCPStore " + state_->where, missing, t);
  }
  Bytes value = r.bytes(kMaxValueBytes);
  if (status != kOk || !r.ok()) state_->malformed("get");
  return value;
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  check_key(key, "add");
  Bytes frame = FrameWriter(kAdd).bytes(key).i64(delta).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "add", {key}, net::deadline_after(timeout()), timeout(), &body);
  BodyReader r(body.data(), body.size());
  if (status == kBadValue) {
    std::string message = r.string(kMaxValueBytes);
    if (!r.ok()) state_->malformed("add");
    throw ValueError(message);
  }
  const int64_t sum = r.i64();
  if (status != kOk || !r.ok()) state_->malformed("add");
  return sum;
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  check_key(key, "compare_set");
  check_value(expected, key, "compare_set");
  check_value(desired, key, "compare_set");
  Bytes frame = FrameWriter(kCompareSet, key.size() + expected.size() + desired.size() + 12).bytes(key).bytes(expected).bytes(desired).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "compare_set", {key}, net::deadline_after(timeout()), timeout(), &body);
  BodyReader r(body.data(), body.size());
  Bytes value = r.bytes(kMaxValueBytes);
  if (status != kOk || !r.ok()) state_->malformed("compare_set");
  return value;
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  check_keys(keys, "check");
  Bytes frame = FrameWriter(kCheck).keys(keys).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "check", keys, net::deadline_after(timeout()), timeout(), &body);
  BodyReader r(body.data(), body.size());
  const uint8_t all = r.u8();
  if (status != kOk || !r.ok()) state_->malformed("check");
  return all != 0;
}

void TCPStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  check_keys(keys, "wait");
  Bytes frame = FrameWriter(kWait).keys(keys).u64(timeout_field(timeout)).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "wait", keys, net::deadline_after(timeout + kServerGrace), timeout, &body);
  if (status == kTimeout) {
    BodyReader r(body.data(), body.size());
    std::vector<std::string> missing = r.strings(kMaxKeyBytes);
    if (!r.ok()) state_->malformed("wait");
    throw_store_timeout("TCPStore " + state_->where, missing, timeout);
  }
  if (status != kOk || !body.empty()) state_->malformed("wait");
}

bool TCPStore::delete_key(const std::string& key) {
  check_key(key, "delete_key");
  Bytes frame = FrameWriter(kDelete).bytes(key).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "delete_key", {key}, net::deadline_after(timeout()), timeout(), &body);
  BodyReader r(body.data(), body.size());
  const uint8_t existed = r.u8();
  if (status != kOk || !r.ok()) state_->malformed("delete_key");
  return existed != 0;
}

int64_t TCPStore::num_keys() {
  Bytes frame = FrameWriter(kNumKeys).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "num_keys", {}, net::deadline_after(timeout()), timeout(), &body);
  BodyReader r(body.data(), body.size());
  const int64_t n = r.i64();
  if (status != kOk || !r.ok()) state_->malformed("num_keys");
  return n;
}

}  // namespace dp::distributed
