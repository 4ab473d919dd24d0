#pragma once
// The POSIX socket pieces the TCP store needs: an owning descriptor, name resolution, deadlines,
// and sends/receives that give up at a deadline instead of blocking. Private to src/distributed.
#include <netdb.h>
#include <sys/socket.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dp::distributed::net {

using Clock = std::chrono::steady_clock;

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "host:port", with an IPv6 literal in brackets ("[::1]:29500") so the port stays readable.
std::string endpoint(const std::string& host, uint16_t port);
// strerror(err) as a string (thread-safe).
std::string errno_text(int err);

// now + timeout, saturating (a timeout of milliseconds::max() means "practically never").
Clock::time_point deadline_after(std::chrono::milliseconds timeout);
// Milliseconds left until `deadline` for poll(): rounded up, 0 when past, at most INT_MAX.
int poll_timeout_ms(Clock::time_point deadline);

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// The addresses `host` names for a TCP socket on `port`, duplicates removed, in resolver order.
// passive: for bind() ("" = every interface). Returns getaddrinfo's error code in *gai_error (0 on
// success; then the list is non-empty).
std::vector<Address> resolve(const std::string& host, uint16_t port, bool passive, int* gai_error);
// "127.0.0.1" or "::1" for a resolved address (messages).
std::string numeric_host(const Address& address);

void set_nonblocking(int fd);
void set_nodelay(int fd);

enum class IoResult { kDone, kTimedOut, kClosed };

// Sends all `size` bytes of a non-blocking socket, waiting for room until `deadline`. kClosed sets
// *err to the errno (0 for an orderly close). Never raises SIGPIPE.
IoResult send_all(int fd, const void* data, size_t size, Clock::time_point deadline, int* err);
// Receives exactly `size` bytes, waiting until `deadline`; kClosed when the peer closed or failed.
IoResult recv_all(int fd, void* data, size_t size, Clock::time_point deadline, int* err);

}  // namespace dp::distributed::net
