#include "distributed/socket.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <algorithm>
#include <climits>
#include <cstring>

namespace dp::distributed::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string endpoint(const std::string& host, uint16_t port) {
  const bool v6_literal = host.find(':') != std::string::npos;
  return (v6_literal ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (possibly a static string, not buf).
  return ::strerror_r(err, buf, sizeof buf);
}

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  if (timeout.count() <= 0) return now;
  // A year is "never" for a store operation; it keeps now + timeout far from overflowing.
  constexpr std::chrono::milliseconds kNever{365LL * 24 * 3600 * 1000};
  return now + std::min(timeout, kNever);
}

int poll_timeout_ms(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

std::vector<Address> resolve(const std::string& host, uint16_t port, bool passive, int* gai_error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  *gai_error = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  std::vector<Address> out;
  if (*gai_error != 0) return out;
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
    Address addr;
    std::memcpy(&addr.storage, a->ai_addr, a->ai_addrlen);
    addr.length = a->ai_addrlen;
    bool seen = false;
    for (const auto& o : out) seen = seen || (o.length == addr.length && std::memcmp(&o.storage, &addr.storage, addr.length) == 0);
    if (!seen) out.push_back(addr);
  }
  ::freeaddrinfo(list);
  if (out.empty()) *gai_error = EAI_NONAME;
  return out;
}

std::string numeric_host(const Address& address) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (address.family() == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&address.storage)->sin_addr, buf, sizeof buf);
  else if (address.family() == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&address.storage)->sin6_addr, buf, sizeof buf);
  return buf;
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void set_nodelay(int fd) {
  // Requests and answers are small and latency-bound: Nagle's delay would add up to 40 ms each.
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

// Waits until fd is ready for `events` or the deadline passes; false on timeout.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (r > 0) return true;  // readable, writable, or an error that the next call reports
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let send/recv report it
  }
}

}  // namespace

IoResult send_all(int fd, const void* data, size_t size, Clock::time_point deadline, int* err) {
  const auto* p = static_cast<const uint8_t*>(data);
  *err = 0;
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline)) return IoResult::kTimedOut;
      continue;
    }
    *err = n < 0 ? errno : 0;
    return IoResult::kClosed;
  }
  return IoResult::kDone;
}

IoResult recv_all(int fd, void* data, size_t size, Clock::time_point deadline, int* err) {
  auto* p = static_cast<uint8_t*>(data);
  *err = 0;
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLIN, deadline)) return IoResult::kTimedOut;
      continue;
    }
    *err = n < 0 ? errno : 0;
    return IoResult::kClosed;
  }
  return IoResult::kDone;
}

}  // namespace dp::distributed::net
