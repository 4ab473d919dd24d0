// Fuzz target: the TCP store server's handshake, frame parser and request handling
// (src/distributed/tcp_store_server.cpp), through a real socket. Two servers live for the whole
// process, on 127.0.0.1, with small limits so that every limit is within a mutation's reach: an
// open one and one that requires a token. The input's first byte chooses how a connection starts:
//   0   the open store: the rest is requests (the parser and every command);
//   1   the token-protected store, no handshake: the rest is what a stranger sends first;
//   2-  the token-protected store after a valid handshake: the rest is requests.
// The target sends the rest, half-closes, reads the answers until the server closes (at most a
// second), then checks that each server still serves a well-behaved client. A crash, a sanitizer
// report, an exception leaving the server's thread (std::terminate), a server that no longer
// answers, or more than 2 GB of memory is a finding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include "distributed/tcp_store_protocol.h"
#include "dp/distributed/store.h"

namespace {

using namespace dp::distributed;
using Clock = std::chrono::steady_clock;

const std::string kToken = "fuzz-token-0123456789abcdef-0123456789";

TCPStoreServerOptions limits(bool open) {
  TCPStoreServerOptions o;
  if (open)
    o.insecure = true;
  else
    o.token = kToken;
  o.max_key_bytes = 256;
  o.max_value_bytes = 4096;
  o.max_keys_per_request = 16;
  o.max_total_bytes = 1 << 20;
  o.max_parked_keys = 64;
  o.max_connections = 64;
  o.max_unauthenticated = 8;
  o.handshake_timeout = std::chrono::milliseconds(1000);
  o.max_wait = std::chrono::milliseconds(100);
  o.log = [](const std::string&) {};
  return o;
}

struct Servers {
  TCPStoreServer open{"127.0.0.1", 0, limits(true)};
  TCPStoreServer locked{"127.0.0.1", 0, limits(false)};
  std::unique_ptr<TCPStore> open_client, locked_client;
  Servers() {
    TCPStoreOptions o;
    o.timeout = std::chrono::milliseconds(5000);
    o.insecure = true;
    open_client = std::make_unique<TCPStore>("127.0.0.1", open.port(), o);
    o.insecure = false;
    o.token = kToken;
    locked_client = std::make_unique<TCPStore>("127.0.0.1", locked.port(), o);
  }
};

Servers& servers() {
  static Servers* s = new Servers();  // never destroyed: the process ends with the fuzzer
  return *s;
}

// A connection to the server, from one of 200 loopback addresses in turn: the target half-closes
// first, so each connection leaves this side in TIME_WAIT for a minute, and at thousands of inputs
// a second one address would run out of ports. A server unreachable for a second is a finding.
int connect_to(uint16_t port) {
  static unsigned next = 0;
  int err = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (next++ % 200));  // 127.0.0.2 ...
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) == 0 &&
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
      return fd;
    err = errno;
    if (fd >= 0) ::close(fd);
    ::usleep(10000);
  }
  std::fprintf(stderr, "store_protocol: cannot connect to the server for a second: %s\n", std::strerror(err));
  std::abort();
}

// Reads until n bytes came, the server closed, or the deadline; what came.
std::string read_some(int fd, size_t n, Clock::time_point deadline) {
  std::string out;
  while (out.size() < n && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    char buf[65536];
    const ssize_t r = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

void send_all(int fd, const uint8_t* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed: what it makes of the rest does not matter
    done += static_cast<size_t>(n);
  }
}

// A valid handshake on a fresh connection to the token-protected server.
bool authenticate(int fd) {
  using namespace dp::distributed::tcp_store;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  const std::string hello = read_some(fd, kHeaderBytes + kHelloBody, deadline);
  if (hello.size() != kHeaderBytes + kHelloBody) return false;
  const auto* server_nonce = reinterpret_cast<const uint8_t*>(hello.data()) + kHeaderBytes + 6;
  uint8_t nonce[kNonceBytes] = {7};
  uint8_t tag[kTagBytes];
  handshake_tag(kToken, kClientLabel, server_nonce, nonce, tag);
  const Bytes auth = FrameWriter(kAuth).raw(nonce, sizeof nonce).raw(tag, sizeof tag).finish();
  send_all(fd, auth.data(), auth.size());
  return read_some(fd, kHeaderBytes + kTagBytes, deadline).size() == kHeaderBytes + kTagBytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Servers& s = servers();
  const uint8_t mode = data[0];
  const int fd = connect_to(mode == 0 ? s.open.port() : s.locked.port());
  bool ok = true;
  if (mode >= 2) ok = authenticate(fd);
  if (!ok) {
    std::fprintf(stderr, "store_protocol: the server refused a valid handshake\n");
    std::abort();
  }
  send_all(fd, data + 1, size - 1);
  ::shutdown(fd, SHUT_WR);
  // The answers, until the server closes (it does once it reads the end of the requests).
  read_some(fd, SIZE_MAX, Clock::now() + std::chrono::seconds(1));
  ::close(fd);
  // Both servers still serve a well-behaved client.
  try {
    (void)s.open_client->check({"fuzz/alive"});
    (void)s.locked_client->check({"fuzz/alive"});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_protocol: a server stopped serving: %s\n", e.what());
    std::abort();
  }
  return 0;
}
