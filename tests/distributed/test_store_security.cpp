// The TCP store as an attacker sees it (docs/distributed.md, "Security"): without the job's token
// no request is served (each command tried raw), a wrong token is refused and logged once per
// address, a recorded handshake does not replay, the client refuses a server that does not hold the
// token; every resource limit is reached and its error names it; the server shares a large value
// among clients that never read their answers; a long wait list costs linear time; a second process
// claiming a rank is refused by name at once; remote text is made printable.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "distributed/tcp_store_protocol.h"
#include "dp/distributed/distributed.h"
#include "support/forked_child.h"

namespace dp::distributed {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kToken = "security-test-token-0123456789abcdef";

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The server's log lines, collected (the callback runs on the server's thread).
struct Log {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  std::vector<std::string> matching(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (const auto& l : lines)
      if (contains(l, part)) out.push_back(l);
    return out;
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

TCPStoreServerOptions server_options(Log* log = nullptr) {
  TCPStoreServerOptions o;
  o.token = kToken;
  if (log) o.log = log->sink();
  return o;
}

TCPStoreOptions client(std::chrono::milliseconds timeout = 5000ms, const std::string& token = kToken) {
  TCPStoreOptions o;
  o.timeout = timeout;
  o.token = token;
  o.insecure = token.empty();
  return o;
}

// The wire format, written out independently of the library (tcp_store_protocol.h documents it).
std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string field(const std::string& bytes) { return le32(static_cast<uint32_t>(bytes.size())) + bytes; }
std::string frame(uint8_t type, const std::string& body) {
  return std::string(1, static_cast<char>(type)) + le32(static_cast<uint32_t>(body.size())) + body;
}

std::string hmac(const std::string& key, const std::string& data) {
  unsigned char out[32];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n);
  return std::string(reinterpret_cast<char*>(out), n);
}

// A raw TCP connection to the server on 127.0.0.1.
class Raw {
 public:
  explicit Raw(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }
  // Exactly n bytes, or what came before the timeout or the end of the connection.
  std::string receive(size_t n, std::chrono::milliseconds timeout) {
    std::string out;
    const auto deadline = Clock::now() + timeout;
    while (out.size() < n && Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[65536];
      const ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (r <= 0) break;
      out.append(buf, static_cast<size_t>(r));
    }
    return out;
  }
  // True when the server closed the connection within `timeout` (anything it sent first is dropped).
  bool closed_by_server(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;
    }
    return false;
  }
  // The server's greeting: its nonce (empty if the greeting is not one).
  std::string greeting() {
    const std::string g = receive(5 + 58, 5s);
    if (g.size() != 63 || g[0] != 1) return {};
    return g.substr(5 + 6, 32);
  }
  // The handshake, with `token`: the kAuth frame sent (for replay tests) and the answer's type.
  int authenticate(const std::string& token, std::string* sent = nullptr) {
    const std::string ns = greeting();
    if (ns.empty()) return -1;
    const std::string nc(32, '\x5a');
    const std::string auth = frame(10, nc + hmac(token, "dp-store v2 client" + ns + nc));
    if (sent) *sent = auth;
    send(auth);
    const std::string answer = receive(5, 5s);
    if (answer.size() != 5) return -1;
    if (answer[0] == 0) {
      const std::string proof = receive(32, 5s);
      if (proof != hmac(token, "dp-store v2 server" + nc + ns)) return -2;  // the server does not hold the token
    }
    return static_cast<unsigned char>(answer[0]);
  }
  // One request's answer: its status and body.
  std::pair<int, std::string> request(const std::string& frame_bytes) {
    send(frame_bytes);
    const std::string header = receive(5, 5s);
    if (header.size() != 5) return {-1, {}};
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<unsigned char>(header[1 + i])) << (8 * i);
    return {static_cast<unsigned char>(header[0]), receive(n, 5s)};
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// ---- the primitive --------------------------------------------------------------------------

TEST(StoreSecurity, HmacSha256MatchesRfc4231) {
  uint8_t out[32];
  const std::string key1(20, '\x0b');
  tcp_store::hmac_sha256(key1.data(), key1.size(), reinterpret_cast<const uint8_t*>("Hi There"), 8, out);
  char hex[65];
  for (int i = 0; i < 32; ++i) std::snprintf(hex + 2 * i, 3, "%02x", out[i]);
  EXPECT_STREQ(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  const std::string data = "what do ya want for nothing?";
  tcp_store::hmac_sha256("Jefe", 4, reinterpret_cast<const uint8_t*>(data.data()), data.size(), out);
  for (int i = 0; i < 32; ++i) std::snprintf(hex + 2 * i, 3, "%02x", out[i]);
  EXPECT_STREQ(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Tags compare equal only when every byte is.
  uint8_t a[32] = {}, b[32] = {};
  EXPECT_TRUE(tcp_store::tags_equal(a, b));
  b[31] = 1;
  EXPECT_FALSE(tcp_store::tags_equal(a, b));
}

TEST(StoreSecurity, GeneratedTokensAreFreshAndTokenFilesMustBePrivate) {
  const std::string a = generate_store_token(), b = generate_store_token();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_THROW(check_store_token("too-short", "t"), ValueError);
  EXPECT_THROW(check_store_token("has a space in it, sixteen+", "t"), ValueError);
  const std::string path = ::testing::TempDir() + "dp_token_" + std::to_string(::getpid());
  { std::ofstream(path) << a << "\n"; }
  ::chmod(path.c_str(), 0640);
  try {
    read_store_token_file(path);
    ADD_FAILURE() << "a group-readable token file was read";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "can be read by others (mode 0640)")) << e.what();
    EXPECT_FALSE(contains(e.what(), a)) << "the message quotes the token";
  }
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(read_store_token_file(path), a);
  ::unlink(path.c_str());
  // A server needs a token, or an explicit choice of an open store.
  try {
    TCPStoreServer server("127.0.0.1", 0, TCPStoreServerOptions{});
    ADD_FAILURE() << "a server without a token started";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "no token")) << e.what();
  }
}

// ---- authentication -------------------------------------------------------------------------

// Every command, sent raw on an unauthenticated connection: the connection is closed, nothing is
// written, and the refusal is logged once for the address.
TEST(StoreSecurity, EveryCommandWithoutTheHandshakeIsRefused) {
  Log log;
  TCPStoreServer server("127.0.0.1", 0, server_options(&log));
  TCPStore good("127.0.0.1", server.port(), client());
  good.set("secret", "42");
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"set", frame(2, field("planted") + field("x"))}, {"get", frame(3, field("secret") + le64(1000))},
      {"add", frame(4, field("planted") + le64(1))},    {"compare_set", frame(5, field("planted") + field("") + field("x"))},
      {"check", frame(6, le32(1) + field("secret"))},   {"wait", frame(7, le32(1) + field("never") + le64(100000))},
      {"delete_key", frame(8, field("secret"))},        {"num_keys", frame(9, "")},
  };
  for (const auto& [name, bytes] : requests) {
    Raw raw(server.port());
    ASSERT_TRUE(raw.connected()) << name;
    ASSERT_FALSE(raw.greeting().empty()) << name;
    raw.send(bytes);
    EXPECT_TRUE(raw.closed_by_server(2s)) << name;
  }
  EXPECT_FALSE(good.check({"planted"}));
  EXPECT_EQ(good.get_string("secret"), "42");
  EXPECT_EQ(good.num_keys(), 1);
  // Logged with the reason, once for the address (eight refusals, one line per reason).
  const auto early = log.matching("before authenticating");
  EXPECT_EQ(early.size(), 1u) << log.all();
  if (!early.empty()) {
    EXPECT_TRUE(contains(early[0], "refused a client from 127.0.0.1: it sent a 'set' request")) << early[0];
  }
}

TEST(StoreSecurity, AWrongTokenIsRefusedAtOnceAndLoggedOncePerAddress) {
  Log log;
  TCPStoreServer server("127.0.0.1", 0, server_options(&log));
  const auto t0 = Clock::now();
  try {
    TCPStore wrong("127.0.0.1", server.port(), client(10s, "another-jobs-token-0123456789abcdef"));
    ADD_FAILURE() << "a wrong token was accepted";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "refused this client's token")) << e.what();
    EXPECT_FALSE(contains(e.what(), "another-jobs-token")) << e.what();
  }
  EXPECT_LT(seconds_since(t0), 1.0) << "a refused token must not be retried until the timeout";
  // A raw client with a wrong proof gets kDenied, then the connection closes; every command after
  // it goes nowhere.
  for (int i = 0; i < 3; ++i) {
    Raw raw(server.port());
    EXPECT_EQ(raw.authenticate("not-the-token-0123456789abcdefghij"), 4);  // kDenied
    raw.send(frame(2, field("planted") + field("x")));
    EXPECT_TRUE(raw.closed_by_server(2s));
  }
  // No token at all: the client says so itself, without a request going out.
  try {
    TCPStore none("127.0.0.1", server.port(), client(2s, ""));
    ADD_FAILURE() << "a client without a token was served";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "requires the job's token and this client has none")) << e.what();
  }
  std::this_thread::sleep_for(100ms);
  const auto wrong = log.matching("wrong token");
  ASSERT_EQ(wrong.size(), 1u) << log.all();
  EXPECT_TRUE(contains(wrong[0], "refused a client from 127.0.0.1: wrong token")) << wrong[0];
  EXPECT_FALSE(contains(log.all(), kToken)) << "the log holds the token";
  TCPStore good("127.0.0.1", server.port(), client());
  EXPECT_FALSE(good.check({"planted"}));
}

TEST(StoreSecurity, ARecordedHandshakeDoesNotReplay) {
  TCPStoreServer server("127.0.0.1", 0, server_options());
  std::string recorded;
  {
    Raw first(server.port());
    ASSERT_EQ(first.authenticate(kToken, &recorded), 0);
    auto [status, body] = first.request(frame(2, field("by-first") + field("1")));
    EXPECT_EQ(status, 0);
  }
  // The same AUTH frame on a new connection: its server nonce is a new one.
  Raw replay(server.port());
  ASSERT_FALSE(replay.greeting().empty());
  replay.send(recorded);
  const std::string answer = replay.receive(5, 2s);
  ASSERT_EQ(answer.size(), 5u);
  EXPECT_EQ(answer[0], 4) << "a replayed handshake was accepted";
  EXPECT_TRUE(replay.closed_by_server(2s));
}

// The client checks the server's proof: a program on the port that does not hold the token (an
// earlier job's store, a squatter) is refused, as is an open store when the client has a token.
TEST(StoreSecurity, AServerThatDoesNotHoldTheTokenIsRefused) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  const uint16_t port = ntohs(a.sin_port);
  // The squatter greets like a store, takes any proof and answers "ok" with a made-up proof.
  std::thread squatter([listener] {
    const int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    const std::string hello = frame(1, le32(0x53545044) + std::string(1, '\x02') + std::string(1, '\x01') + std::string(32, '\x11') + le32(8192) +
                                           le32(8 << 20) + le32(1024) + le64(60000));
    ::send(c, hello.data(), hello.size(), MSG_NOSIGNAL);
    char buf[69];
    size_t got = 0;
    while (got < sizeof buf) {
      const ssize_t n = ::recv(c, buf + got, sizeof buf - got, 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    const std::string ok = frame(0, std::string(32, '\x22'));
    ::send(c, ok.data(), ok.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(200ms);
    ::close(c);
  });
  try {
    TCPStore victim("127.0.0.1", port, client(3s));
    ADD_FAILURE() << "a squatter passed for the job's store";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "does not hold this job's token")) << e.what();
  }
  squatter.join();
  ::close(listener);
  TCPStoreServerOptions open;
  open.insecure = true;
  TCPStoreServer open_server("127.0.0.1", 0, open);
  try {
    TCPStore c("127.0.0.1", open_server.port(), client(3s));
    ADD_FAILURE() << "a client with a token used an open store";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "an open store")) << e.what();
  }
}

TEST(StoreSecurity, SilentAndFloodingConnectionsDoNotLockClientsOut) {
  Log log;
  TCPStoreServerOptions o = server_options(&log);
  o.handshake_timeout = 300ms;
  o.max_unauthenticated = 16;
  TCPStoreServer server("127.0.0.1", 0, o);
  // A silent connection is closed after the handshake timeout, and logged.
  Raw silent(server.port());
  ASSERT_FALSE(silent.greeting().empty());
  const auto t0 = Clock::now();
  EXPECT_TRUE(silent.closed_by_server(3s));
  EXPECT_GE(seconds_since(t0), 0.2);
  // 200 connections that never authenticate, while clients of the job connect and work.
  std::vector<std::unique_ptr<Raw>> flood;
  for (int i = 0; i < 200; ++i) flood.push_back(std::make_unique<Raw>(server.port()));
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    TCPStore c("127.0.0.1", server.port(), client(10s));
    c.set("k" + std::to_string(i), "v");
    EXPECT_LT(seconds_since(start), 5.0);
  }
  EXPECT_FALSE(log.matching("did not authenticate within 300 ms (handshake_timeout)").empty()) << log.all();
  EXPECT_FALSE(log.matching("(max_unauthenticated)").empty()) << log.all();
}

// What the handshake adds to a job's start: each rank's store connection costs one more round trip
// and two HMACs. Measured as the median time to connect (and shake hands) to an authenticated
// server and to an open one, on loopback.
TEST(StoreSecurity, TheHandshakeAddsWellUnderFiveMillisecondsToAConnection) {
  TCPStoreServer locked("127.0.0.1", 0, server_options());
  TCPStoreServerOptions o;
  o.insecure = true;
  TCPStoreServer open("127.0.0.1", 0, o);
  auto median_connect_us = [](uint16_t port, const std::string& token) {
    std::vector<double> us;
    for (int i = 0; i < 200; ++i) {
      const auto t0 = Clock::now();
      TCPStore c("127.0.0.1", port, client(5s, token));
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  const double with = median_connect_us(locked.port(), kToken), without = median_connect_us(open.port(), "");
  std::printf("[ measured ] connecting to the store on loopback (median of 200): %.0f us with the handshake, %.0f us without; added %.0f us\n", with,
              without, with - without);
  EXPECT_LT(with - without, 5000.0);
}

// ---- limits: each reached, each named -------------------------------------------------------

TEST(StoreSecurity, KeyValueAndKeyCountLimitsAreNamed) {
  TCPStoreServerOptions o = server_options();
  o.max_key_bytes = 100;
  o.max_value_bytes = 1000;
  o.max_keys_per_request = 4;
  TCPStoreServer server("127.0.0.1", 0, o);
  TCPStore c("127.0.0.1", server.port(), client());
  // The client knows the server's limits from its greeting: nothing is sent.
  try {
    c.set(std::string(101, 'k'), "v");
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "a key of 101 bytes is longer than the server's limit of 100 bytes")) << e.what();
  }
  try {
    c.set("k", std::string(1001, 'v'));
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "is larger than the server's limit of 1000 bytes")) << e.what();
  }
  try {
    c.check({"a", "b", "c", "d", "e"});
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "5 keys in one request; the server's limit is 4")) << e.what();
  }
  // A client that ignores them gets the server's answer, naming the option.
  Raw raw(server.port());
  ASSERT_EQ(raw.authenticate(kToken), 0);
  auto [s1, m1] = raw.request(frame(2, field(std::string(101, 'k')) + field("v")));
  EXPECT_EQ(s1, 3);
  EXPECT_TRUE(contains(m1, "longer than the store's limit of 100 bytes (max_key_bytes")) << m1;
  auto [s2, m2] = raw.request(frame(2, field("k") + field(std::string(1001, 'v'))));
  EXPECT_EQ(s2, 3);
  EXPECT_TRUE(contains(m2, "(max_value_bytes")) << m2;
  auto [s3, m3] = raw.request(frame(7, le32(5) + field("a") + field("b") + field("c") + field("d") + field("e") + le64(100)));
  EXPECT_EQ(s3, 3);
  EXPECT_TRUE(contains(m3, "5 keys in one request, more than the store's limit of 4 (max_keys_per_request")) << m3;
  // A frame larger than any request can be under these limits: the connection is closed.
  raw.send(frame(2, std::string(3000, 'x')));
  EXPECT_TRUE(raw.closed_by_server(2s));
  EXPECT_EQ(c.num_keys(), 0);
}

TEST(StoreSecurity, TheQuotaRefusesASetAndDeletingMakesRoom) {
  TCPStoreServerOptions o = server_options();
  o.max_total_bytes = 1000;
  TCPStoreServer server("127.0.0.1", 0, o);
  TCPStore c("127.0.0.1", server.port(), client());
  c.set("a", std::string(600, 'x'));
  try {
    c.set("b", std::string(600, 'x'));
    ADD_FAILURE() << "the quota was exceeded";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "over its quota of 1000 bytes (max_total_bytes")) << e.what();
  }
  c.set("a", std::string(300, 'x'));        // replacing counts the difference
  c.set("b", std::string(698, 'x'));        // 301 + 699: exactly the quota
  EXPECT_THROW(c.add("n", 1), StoreError);  // full: even a counter
  EXPECT_TRUE(c.delete_key("b"));
  EXPECT_EQ(c.add("n", 1), 1);
}

TEST(StoreSecurity, ParkedKeysConnectionsAndWaitsAreBounded) {
  Log log;
  TCPStoreServerOptions o = server_options(&log);
  o.max_parked_keys = 3;
  o.max_connections = 2;
  o.max_wait = 300ms;
  TCPStoreServer server("127.0.0.1", 0, o);
  TCPStore c("127.0.0.1", server.port(), client(10s));
  try {
    c.wait({"w1", "w2", "w3", "w4"}, 5s);
    ADD_FAILURE();
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "would exceed its limit of 3 (max_parked_keys")) << e.what();
  }
  // A wait longer than the server's longest ends at that, and says so.
  const auto t0 = Clock::now();
  try {
    c.wait({"never"}, 5s);
    ADD_FAILURE();
  } catch (const StoreTimeout& e) {
    EXPECT_TRUE(contains(e.what(), "the server's longest wait")) << e.what();
    EXPECT_EQ(e.keys(), std::vector<std::string>{"never"});
  }
  EXPECT_LT(seconds_since(t0), 2.0);
  TCPStore second("127.0.0.1", server.port(), client(10s));
  EXPECT_THROW(TCPStore("127.0.0.1", server.port(), client(500ms)), StoreError);
  EXPECT_FALSE(log.matching("(max_connections").empty()) << log.all();
  second.set("still", "served");
  EXPECT_EQ(c.get_string("still"), "served");
}

// A large value read by clients that never read their answers is held once, not once per client.
long resident_kib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

TEST(StoreSecurity, UnreadAnswersShareTheStoredValue) {
  TCPStoreServer server("127.0.0.1", 0, server_options());
  TCPStore c("127.0.0.1", server.port(), client());
  c.set("big", std::string(8 << 20, 'v'));
  const long before = resident_kib();
  std::vector<std::unique_ptr<Raw>> readers;
  for (int i = 0; i < 40; ++i) {
    auto r = std::make_unique<Raw>(server.port());
    ASSERT_EQ(r->authenticate(kToken), 0);
    r->send(frame(3, field("big") + le64(1000)));  // and never read the answer
    readers.push_back(std::move(r));
  }
  EXPECT_EQ(c.num_keys(), 1);  // served after all 40 requests
  const long grown = resident_kib() - before;
  std::printf("[ measured ] 40 unread 8 MiB answers: resident memory grew %ld KiB (a copy each: 327680 KiB)\n", grown);
  EXPECT_LT(grown, 64 * 1024);
}

// A wait on many keys, then the keys written one by one: each write looks at the waiting list from
// where the last one stopped, not from its start (quadratic before).
TEST(StoreSecurity, ALongWaitListCostsLinearTime) {
  TCPStoreServer server("127.0.0.1", 0, server_options());
  TCPStore writer("127.0.0.1", server.port(), client(30s));
  TCPStore waiter("127.0.0.1", server.port(), client(30s));
  const int n = 20000;
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("key/" + std::to_string(i));
  std::atomic<bool> done{false};
  std::string error;
  std::thread t([&] {
    try {
      waiter.wait(keys, 30s);
    } catch (const std::exception& e) {
      error = e.what();
    }
    done = true;
  });
  std::this_thread::sleep_for(50ms);
  const auto t0 = Clock::now();
  for (const auto& k : keys) writer.set(k, "1");
  t.join();
  EXPECT_EQ(error, "");
  EXPECT_TRUE(done);
  std::printf("[ measured ] %d writes answering one parked wait on all of them: %.2f s\n", n, seconds_since(t0));
  EXPECT_LT(seconds_since(t0), 10.0);
}

// ---- identity -------------------------------------------------------------------------------

// A second process claiming a rank that a first one holds is refused at once, naming the holder's
// host and pid; the holder, still waiting for its group, fails too.
TEST(StoreSecurity, ASecondProcessClaimingARankIsRefusedByNameAtOnce) {
  TCPStoreServer server("127.0.0.1", 0, server_options());
  const uint16_t port = server.port();
  auto join = [port](int rank) {
    ProcessGroupOptions o;
    o.timeout = 3s;
    o.bind_address = "127.0.0.1";
    auto store = std::make_shared<TCPStore>("127.0.0.1", port, client(10s));
    auto pg = make_gloo_process_group(store, rank, 2, o);
    return 0;
  };
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  // The holder of rank 1 (rank 0 never comes).
  test::ForkedChild holder([&] {
    try {
      join(1);
    } catch (const RendezvousError& e) {
      const std::string m = e.what();
      [[maybe_unused]] ssize_t n = ::write(pipe_fds[1], m.data(), m.size());
      return 7;
    }
    return 0;
  });
  TCPStore observer("127.0.0.1", port, client());
  const auto until = Clock::now() + 10s;
  while (!observer.check({"default/rank/1"}) && Clock::now() < until) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(observer.check({"default/rank/1"}));
  // The twin: refused within a second, naming the holder.
  std::string twin_error;
  int twin_pid = 0;
  const auto t0 = Clock::now();
  {
    test::ForkedChild twin([&] {
      try {
        join(1);
      } catch (const RendezvousError& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 7;
      }
      return 0;
    });
    twin_pid = twin.pid();
    EXPECT_EQ(twin.wait(5s), 7);
  }
  const double took = seconds_since(t0);
  EXPECT_LT(took, 1.0);
  std::printf("[ measured ] a second process claiming rank 1 was refused %.0f ms after it started\n", took * 1000);
  const std::string claim = observer.get_string("default/rank/1");
  EXPECT_TRUE(contains(claim, "pid " + std::to_string(holder.pid()))) << claim;
  EXPECT_EQ(observer.get_string("default/rank/1/contender").find("pid " + std::to_string(twin_pid)) != std::string::npos, true);
  // Rank 0 arrives: the holder's group would form with a twin of rank 1 about; it fails, naming both.
  std::thread rank0([&] {
    try {
      join(0);
    } catch (...) {
    }
  });
  EXPECT_EQ(holder.wait(20s), 7);
  rank0.join();
  ::close(pipe_fds[1]);
  char buf[4096];
  const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
  ::close(pipe_fds[0]);
  const std::string holder_error(buf, n > 0 ? static_cast<size_t>(n) : 0);
  EXPECT_TRUE(contains(holder_error, "rank 1 was claimed by two processes")) << holder_error;
  EXPECT_TRUE(contains(holder_error, "pid " + std::to_string(twin_pid))) << holder_error;
}

TEST(StoreSecurity, ADifferentWorldSizeIsRefusedByName) {
  auto store = std::make_shared<HashStore>(5s);
  ProcessGroupOptions o;
  o.timeout = 1s;
  std::thread first([&] {
    try {
      make_gloo_process_group(store, 0, 2, o);
    } catch (...) {
    }
  });
  const auto until = Clock::now() + 5s;
  while (!store->check({"default/world_size"}) && Clock::now() < until) std::this_thread::sleep_for(5ms);
  try {
    make_gloo_process_group(store, 1, 3, o);
    ADD_FAILURE() << "a rank of another world size joined";
  } catch (const RendezvousError& e) {
    EXPECT_TRUE(contains(e.what(), "was started with world size 3, but the group's is 2")) << e.what();
  }
  first.join();
}

// ---- remote text ----------------------------------------------------------------------------

TEST(StoreSecurity, RemoteTextIsMadePrintable) {
  EXPECT_EQ(printable_text("plain text"), "plain text");
  EXPECT_EQ(printable_text("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(printable_text("one\ndp-run: forged\r"), "one\\x0adp-run: forged\\x0d");
  EXPECT_EQ(printable_text("bell\a del\x7f"), "bell\\x07 del\\x7f");
  // C1 controls (U+009B is a CSI in UTF-8) and bytes that are not UTF-8 are escaped; UTF-8 stays.
  EXPECT_EQ(printable_text("\xc2\x9b"
                           "6n"),
            "\\xc2\\x9b6n");
  EXPECT_EQ(printable_text("caf\xc3\xa9 \xe6\x97\xa5"), "caf\xc3\xa9 \xe6\x97\xa5");
  EXPECT_EQ(printable_text("\xff\xfe\xc3"), "\\xff\\xfe\\xc3");
  // Clipped, saying how long it was.
  EXPECT_EQ(printable_text(std::string(300, 'a'), 10), "aaaaaaaaaa... (300 bytes)");
}

}  // namespace
}  // namespace dp::distributed
