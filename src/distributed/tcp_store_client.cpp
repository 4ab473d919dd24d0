// TCPStore: the client. One connection, one request at a time (a mutex), every wait bounded: the
// server times get/wait itself and answers with the missing keys; the client waits that long plus
// a grace period, so a wedged server is a StoreTimeout, not a hang, and a closed connection is a
// StoreError naming host:port at once.
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <openssl/crypto.h>
#include <algorithm>
#include <mutex>
#include <optional>
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

// The first keys, quoted (keys are the caller's, but may be long or many).
std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) s += (i ? ", '" : "'") + printable_text(keys[i]) + "'";
  if (keys.size() > 8) s += detail::str(" and ", keys.size() - 8, " more");
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

enum class Handshake { kOk, kRetry, kNotAStore, kRefused };

// The limits a server announced in its greeting.
struct ServerLimits {
  size_t max_key_bytes = size_t{8} << 10;
  size_t max_value_bytes = size_t{8} << 20;
  size_t max_keys_per_request = size_t{128} << 10;
  uint64_t max_wait_ms = 0;
};

// Reads the server's greeting and proves that this client holds the token (tcp_store_protocol.h).
// A port that belongs to another program fails here, not at the first request; so does a server
// that does not hold the token, or refuses this client's.
Handshake handshake(int fd, const std::string& token, Clock::time_point deadline, ServerLimits* limits, std::string* why) {
  uint8_t header[kHeaderBytes];
  int err = 0;
  auto io = net::recv_all(fd, header, sizeof header, deadline, &err);
  if (io == net::IoResult::kTimedOut) {
    *why = "it accepted the connection but did not send the greeting of the TCPStore handshake (is it a TCPStore server, of this dparallel version?)";
    return Handshake::kNotAStore;
  }
  if (io == net::IoResult::kClosed) {
    *why = "it closed the connection before its greeting" + (err ? " (" + net::errno_text(err) + ")" : std::string()) +
           " (too many connections at once, or not a TCPStore server)";
    return Handshake::kRetry;
  }
  uint8_t body[kHelloBody];
  if (header_type(header) != kHello || header_length(header) != kHelloBody ||
      net::recv_all(fd, body, sizeof body, deadline, &err) != net::IoResult::kDone) {
    *why = "it greeted with something else (it is not a TCPStore server of this dparallel version)";
    return Handshake::kNotAStore;
  }
  BodyReader r(body, sizeof body);
  const uint32_t magic = r.u32();
  const uint8_t version = r.u8();
  const uint8_t flags = r.u8();
  const uint8_t* server_nonce = r.raw(kNonceBytes);
  limits->max_key_bytes = r.u32();
  limits->max_value_bytes = r.u32();
  limits->max_keys_per_request = r.u32();
  limits->max_wait_ms = r.u64();
  if (!r.ok() || magic != kMagic || version != kVersion) {
    *why = detail::str("it is not a TCPStore server of this version (magic ", magic, ", version ", int(version), "; expected ", kMagic, ", ",
                       int(kVersion), ")");
    return Handshake::kNotAStore;
  }
  const bool required = (flags & kFlagTokenRequired) != 0;
  if (!required) {
    if (token.empty()) return Handshake::kOk;
    *why = "it is an open store (it asks for no token) but this client has the job's token: it is not this job's store";
    return Handshake::kRefused;
  }
  if (token.empty()) {
    *why = "it requires the job's token and this client has none (TCPStoreOptions::token; under dp-run: DP_STORE_TOKEN)";
    return Handshake::kRefused;
  }
  uint8_t nonce[kNonceBytes];
  random_bytes(nonce, sizeof nonce);
  uint8_t tag[kTagBytes];
  handshake_tag(token, kClientLabel, server_nonce, nonce, tag);
  const Bytes auth = FrameWriter(kAuth, kAuthBody).raw(nonce, sizeof nonce).raw(tag, sizeof tag).finish();
  io = net::send_all(fd, auth.data(), auth.size(), deadline, &err);
  if (io == net::IoResult::kDone) io = net::recv_all(fd, header, sizeof header, deadline, &err);
  if (io != net::IoResult::kDone) {
    *why = io == net::IoResult::kTimedOut ? "it did not answer the authentication" : "it closed the connection during the authentication";
    return Handshake::kRetry;
  }
  if (header_type(header) == kDenied) {
    *why = "it refused this client's token: the token differs from the one the server was given (DP_STORE_TOKEN, --token-file)";
    return Handshake::kRefused;
  }
  uint8_t proof[kTagBytes];
  if (header_type(header) != kOk || header_length(header) != kTagBytes ||
      net::recv_all(fd, proof, sizeof proof, deadline, &err) != net::IoResult::kDone) {
    *why = "it answered the authentication with something else";
    return Handshake::kNotAStore;
  }
  uint8_t expected[kTagBytes];
  handshake_tag(token, kServerLabel, nonce, server_nonce, expected);
  const bool ok = tags_equal(expected, proof);
  OPENSSL_cleanse(expected, sizeof expected);
  if (!ok) {
    *why = "it does not hold this job's token (another job's store, or an earlier run's, on this port?)";
    return Handshake::kRefused;
  }
  return Handshake::kOk;
}

// Why connecting failed: `refused` when the server's host answered that nothing listens (the
// server has stopped), as opposed to a network that does not answer.
struct ConnectFailure {
  std::string message;
  bool refused = false;
};

}  // namespace

struct TCPStore::State {
  // Declared first, destroyed last: the client's connection closes before its own server stops.
  std::unique_ptr<TCPStoreServer> server;
  std::string connect_host;
  uint16_t port = 0;
  std::string where;  // "host:port" in messages
  std::string token;
  std::chrono::milliseconds retry_for{0};
  std::mutex mu;     // one request at a time on the connection
  net::Fd fd;        // invalid after a timeout (the answer may still come: reconnect) or a loss
  std::string lost;  // set when the server went away: every later request fails with it
  ServerLimits limits;

  ~State() { OPENSSL_cleanse(token.data(), token.size()); }

  // Connects (retrying until `deadline`: the server may not be up yet) and shakes hands. With
  // `refused_is_final` (reconnecting after a failure) a refused connection ends the attempts: the
  // server is gone. Throws ConnectFailure, or StoreError for a peer that is not usable.
  void connect(Clock::time_point deadline, milliseconds timeout, bool refused_is_final = false) {
    std::string last_error = "no attempt finished";
    milliseconds backoff = kFirstRetry;
    for (;;) {
      int gai = 0;
      // Retried as well: a cluster's name for rank 0 may appear only once rank 0's machine is up.
      const std::vector<net::Address> addresses = net::resolve(connect_host, port, false, &gai);
      if (gai != 0) last_error = detail::str("the host name does not resolve (", ::gai_strerror(gai), ")");
      bool refused = !addresses.empty();
      for (const auto& a : addresses) {
        auto attempt_deadline = deadline;
        if (addresses.size() > 1) attempt_deadline = std::min(deadline, Clock::now() + kMaxAttempt);
        net::Fd candidate;
        const int err = connect_once(a, attempt_deadline, &candidate);
        if (err != 0) {
          last_error = net::numeric_host(a) + ": " + net::errno_text(err);
          refused = refused && err == ECONNREFUSED;
          continue;
        }
        refused = false;
        std::string why;
        ServerLimits announced;
        // The handshake gets at least a second even when the connection came at the last moment.
        const Handshake h = handshake(candidate.get(), token, std::max(deadline, Clock::now() + milliseconds(1000)), &announced, &why);
        if (h == Handshake::kOk) {
          fd = std::move(candidate);
          limits = announced;
          return;
        }
        if (h == Handshake::kNotAStore || h == Handshake::kRefused)
          throw StoreError(detail::str("TCPStore: the program at ", where, " is not usable: ", why));
        last_error = why;
      }
      if (refused_is_final && refused) throw ConnectFailure{last_error, true};
      const auto now = Clock::now();
      if (now >= deadline)
        throw ConnectFailure{detail::str("TCPStore: could not connect to the server at ", where, " within ", timeout.count(),
                                         " ms (last error: ", last_error, "); is the store server (rank 0 or the launcher) running and reachable?"),
                             false};
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
  // `op` and `keys` name the request in errors; `answer_within` bounds each attempt's wait for the
  // answer (and `timeout` is what messages call it). With retry_for, a request that gets no answer
  // or whose connection breaks is sent again on a new connection (not `add`: not idempotent).
  uint8_t exchange(const Bytes& frame, const char* op, const std::vector<std::string>& keys, milliseconds answer_within, milliseconds timeout,
                   Bytes* body, bool idempotent = true) {
    if (!lost.empty())
      throw StoreError(detail::str("TCPStore: cannot run ", op, ": the connection to the server at ", where, " was lost earlier (", lost, ")"));
    const std::string what = keys.empty() ? std::string(op) : std::string(op) + " of key(s) " + quoted_keys(keys);
    const bool retrying = retry_for.count() > 0;
    std::optional<Clock::time_point> failing_since;
    auto give_up_at = [&] { return *failing_since + retry_for; };
    for (;;) {
      const auto attempt_start = Clock::now();
      if (!fd.valid()) {
        try {
          if (failing_since)
            connect(std::max(give_up_at(), Clock::now() + milliseconds(1)), retry_for, /*refused_is_final=*/true);
          else
            connect(net::deadline_after(answer_within), timeout);
        } catch (const ConnectFailure& f) {
          if (f.refused)
            lose(detail::str("TCPStore: lost the server at ", where, " during ", what, ": it refuses connections now (", f.message,
                             "); the store server (rank 0 or the launcher) has stopped"));
          if (failing_since)
            lose(detail::str("TCPStore: no answer from the server at ", where, " to ", what, " for ", retry_for.count(), " ms (", f.message,
                             "); the network to it is down, or its machine is"));
          throw StoreError(f.message);
        }
      }
      const auto deadline = net::deadline_after(answer_within);
      int err = 0;
      uint8_t header[kHeaderBytes];
      auto io = net::send_all(fd.get(), frame.data(), frame.size(), deadline, &err);
      if (io == net::IoResult::kDone) io = net::recv_all(fd.get(), header, sizeof header, deadline, &err);
      size_t size = 0;
      if (io == net::IoResult::kDone) {
        size = header_length(header);
        if (size > kMaxBodyBytesCap) lose(detail::str("TCPStore: the server at ", where, " sent a malformed answer to ", what));
        body->resize(size);
        io = net::recv_all(fd.get(), body->data(), size, deadline, &err);
      }
      if (io == net::IoResult::kDone) return header_type(header);
      // The answer may still come and would be taken for the next one's: start a new connection.
      fd.reset();
      if (!retrying) {
        if (io == net::IoResult::kTimedOut)
          throw StoreTimeout(detail::str("TCPStore ", where, ": no answer from the server to ", what, " within ", timeout.count(),
                                         " ms (the server is overloaded or stopped)"),
                             keys);
        lose(detail::str("TCPStore: lost the connection to the server at ", where, " during ", what, " (",
                         err ? net::errno_text(err) : std::string("closed by the server"),
                         "); the store server (rank 0 or the launcher) has stopped or failed"));
      }
      if (!idempotent)
        throw StoreError(detail::str("TCPStore ", where, ": ", io == net::IoResult::kTimedOut ? "no answer to " : "the connection broke during ",
                                     what, "; whether it happened is unknown (", op, " is not sent twice)"));
      if (!failing_since) failing_since = attempt_start;
      if (Clock::now() >= give_up_at())
        throw StoreTimeout(detail::str("TCPStore ", where, ": no answer from the server to ", what, " for ", retry_for.count(),
                                       " ms, reconnecting meanwhile (the network to it is down, or the server is stopped)"),
                           keys);
      std::this_thread::sleep_for(kFirstRetry);
    }
  }

  [[noreturn]] void malformed(const char* op) { lose(detail::str("TCPStore: the server at ", where, " sent a malformed answer to ", op)); }

  // A kLimit answer: the server's message (remote text: made printable) as a StoreError.
  [[noreturn]] void limit_error(const Bytes& body, const char* op) {
    BodyReader r(body.data(), body.size());
    std::string message = r.string(kMaxValueBytesCap);
    if (!r.ok()) malformed(op);
    throw StoreError(detail::str("TCPStore ", where, ": the server refused ", printable_text(message, 1000)));
  }

  // Throws the StoreTimeout of a kTimeout answer to get/wait.
  [[noreturn]] void timeout_error(const Bytes& body, const char* op, milliseconds asked) {
    BodyReader r(body.data(), body.size());
    std::vector<std::string> missing = r.strings(kMaxKeyBytesCap);
    const uint64_t waited = r.u64();
    if (!r.ok()) malformed(op);
    if (waited + 50 < static_cast<uint64_t>(std::max<int64_t>(0, asked.count())))
      throw StoreTimeout(detail::str("TCPStore ", where, ": timed out after ", waited, " ms (the server's longest wait; ", asked.count(),
                                     " ms were asked) waiting for key(s) ", quoted_keys(missing)),
                         missing);
    throw_store_timeout("TCPStore " + where, missing, asked);
  }

  void check_key(const std::string& key, const char* op) const {
    DP_CHECK(key.size() <= limits.max_key_bytes, ValueError, "TCPStore::", op, ": a key of ", key.size(),
             " bytes is longer than the server's limit of ", limits.max_key_bytes, " bytes");
  }
  void check_value(const Bytes& value, const std::string& key, const char* op) const {
    DP_CHECK(value.size() <= limits.max_value_bytes, ValueError, "TCPStore::", op, ": the value of key '", printable_text(key), "' (", value.size(),
             " bytes) is larger than the server's limit of ", limits.max_value_bytes, " bytes");
  }
  void check_keys(const std::vector<std::string>& keys, const char* op) const {
    DP_CHECK(keys.size() <= limits.max_keys_per_request, ValueError, "TCPStore::", op, ": ", keys.size(),
             " keys in one request; the server's limit is ", limits.max_keys_per_request);
    size_t total = 0;
    for (const auto& k : keys) {
      check_key(k, op);
      total += 4 + k.size();
    }
    const size_t max_body = max_body_bytes(limits.max_key_bytes, limits.max_value_bytes);
    DP_CHECK(total + 16 <= max_body, ValueError, "TCPStore::", op, ": the keys take ", total, " bytes, more than a request may hold (", max_body,
             " bytes with the server's limits)");
  }
};

namespace {

uint64_t timeout_field(milliseconds t) { return t.count() < 0 ? 0 : static_cast<uint64_t>(t.count()); }

}  // namespace

TCPStore::TCPStore(std::string host, uint16_t port, TCPStoreOptions options)
    : Store(options.timeout), host_(std::move(host)), state_(std::make_unique<State>()) {
  if (options.token.empty()) {
    DP_CHECK(options.insecure, ValueError, "TCPStore: no token for the store at ", net::endpoint(host_, port),
             ": give TCPStoreOptions::token the job's secret (the server's), or set insecure for an open store on a trusted machine");
  } else {
    check_store_token(options.token, "TCPStoreOptions::token");
  }
  DP_CHECK(options.retry_for.count() >= 0, ValueError, "TCPStoreOptions::retry_for must not be negative");
  const auto deadline = net::deadline_after(options.timeout);
  if (options.is_server) {
    TCPStoreServerOptions server = options.server;
    server.token = options.token;
    server.insecure = options.insecure;
    state_->server = std::make_unique<TCPStoreServer>(host_, port, std::move(server));
  }
  state_->port = state_->server ? state_->server->port() : port;
  state_->connect_host = connectable_host(host_);
  state_->where = net::endpoint(state_->connect_host, state_->port);
  state_->token = std::move(options.token);
  OPENSSL_cleanse(options.token.data(), options.token.size());
  state_->retry_for = options.retry_for;
  std::lock_guard<std::mutex> lock(state_->mu);
  try {
    state_->connect(deadline, options.timeout);
  } catch (const ConnectFailure& f) {
    throw StoreError(f.message);
  }
}

TCPStore::~TCPStore() = default;

uint16_t TCPStore::port() const { return state_->port; }

void TCPStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->check_key(key, "set");
  state_->check_value(value, key, "set");
  Bytes frame = FrameWriter(kSet, key.size() + value.size() + 8).bytes(key).bytes(value).finish();
  Bytes body;
  const uint8_t status = state_->exchange(frame, "set", {key}, timeout(), timeout(), &body);
  if (status == kLimit) state_->limit_error(body, "set");
  if (status != kOk || !body.empty()) state_->malformed("set");
}

Bytes TCPStore::get(const std::string& key) {
  const milliseconds t = timeout();
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->check_key(key, "get");
  Bytes frame = FrameWriter(kGet).bytes(key).u64(timeout_field(t)).finish();
  Bytes body;
  const uint8_t status = state_->exchange(frame, "get", {key}, t + kServerGrace, t, &body);
  if (status == kTimeout) state_->timeout_error(body, "get", t);
  if (status == kLimit) state_->limit_error(body, "get");
  BodyReader r(body.data(), body.size());
  Bytes value = r.bytes(kMaxValueBytesCap);
  if (status != kOk || !r.ok()) state_->malformed("get");
  return value;
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->check_key(key, "add");
  Bytes frame = FrameWriter(kAdd).bytes(key).i64(delta).finish();
  Bytes body;
  const uint8_t status = state_->exchange(frame, "add", {key}, timeout(), timeout(), &body, /*idempotent=*/false);
  if (status == kLimit) state_->limit_error(body, "add");
  BodyReader r(body.data(), body.size());
  if (status == kBadValue) {
    std::string message = r.string(kMaxValueBytesCap);
    if (!r.ok()) state_->malformed("add");
    throw ValueError(printable_text(message, 1000));
  }
  const int64_t sum = r.i64();
  if (status != kOk || !r.ok()) state_->malformed("add");
  return sum;
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->check_key(key, "compare_set");
  state_->check_value(expected, key, "compare_set");
  state_->check_value(desired, key, "compare_set");
  Bytes frame = FrameWriter(kCompareSet, key.size() + expected.size() + desired.size() + 12).bytes(key).bytes(expected).bytes(desired).finish();
  Bytes body;
  const uint8_t status = state_->exchange(frame, "compare_set", {key}, timeout(), timeout(), &body);
  if (status == kLimit) state_->limit_error(body, "compare_set");
  BodyReader r(body.data(), body.size());
  Bytes value = r.bytes(kMaxValueBytesCap);
  if (status != kOk || !r.ok()) state_->malformed("compare_set");
  return value;
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->check_keys(keys, "check");
  Bytes frame = FrameWriter(kCheck).keys(keys).finish();
  Bytes body;
  const uint8_t status = state_->exchange(frame, "check", keys, timeout(), timeout(), &body);
  if (status == kLimit) state_->limit_error(body, "check");
  BodyReader r(body.data(), body.size());
  const uint8_t all = r.u8();
  if (status != kOk || !r.ok()) state_->malformed("check");
  return all != 0;
}

void TCPStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->check_keys(keys, "wait");
  Bytes frame = FrameWriter(kWait).keys(keys).u64(timeout_field(timeout)).finish();
  Bytes body;
  const uint8_t status = state_->exchange(frame, "wait", keys, timeout + kServerGrace, timeout, &body);
  if (status == kTimeout) state_->timeout_error(body, "wait", timeout);
  if (status == kLimit) state_->limit_error(body, "wait");
  if (status != kOk || !body.empty()) state_->malformed("wait");
}

bool TCPStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->check_key(key, "delete_key");
  Bytes frame = FrameWriter(kDelete).bytes(key).finish();
  Bytes body;
  const uint8_t status = state_->exchange(frame, "delete_key", {key}, timeout(), timeout(), &body);
  BodyReader r(body.data(), body.size());
  const uint8_t existed = r.u8();
  if (status != kOk || !r.ok()) state_->malformed("delete_key");
  return existed != 0;
}

int64_t TCPStore::num_keys() {
  Bytes frame = FrameWriter(kNumKeys).finish();
  Bytes body;
  std::lock_guard<std::mutex> lock(state_->mu);
  const uint8_t status = state_->exchange(frame, "num_keys", {}, timeout(), timeout(), &body);
  BodyReader r(body.data(), body.size());
  const int64_t n = r.i64();
  if (status != kOk || !r.ok()) state_->malformed("num_keys");
  return n;
}

}  // namespace dp::distributed
