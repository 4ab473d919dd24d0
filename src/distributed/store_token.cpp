// The TCPStore's token: generating one, checking one a user gave, reading a token file (store.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <openssl/crypto.h>
#include "distributed/tcp_store_protocol.h"
#include "dp/core/errors.h"
#include "dp/distributed/store.h"

namespace dp::distributed {

namespace {
constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 1024;
}  // namespace

std::string generate_store_token() {
  uint8_t raw[32];
  tcp_store::random_bytes(raw, sizeof raw);
  static const char* hex = "0123456789abcdef";
  std::string token(64, '0');
  for (size_t i = 0; i < sizeof raw; ++i) {
    token[2 * i] = hex[raw[i] >> 4];
    token[2 * i + 1] = hex[raw[i] & 15];
  }
  OPENSSL_cleanse(raw, sizeof raw);
  return token;
}

void check_store_token(const std::string& token, const std::string& what) {
  // Never quote the token: only its length and the kind of problem.
  DP_CHECK(token.size() >= kMinTokenBytes && token.size() <= kMaxTokenBytes, ValueError, what, ": a token of ", token.size(),
           " bytes; a store token is ", kMinTokenBytes, "-", kMaxTokenBytes, " printable characters (generate one with: openssl rand -hex 32)");
  for (const char c : token)
    DP_CHECK(c > ' ' && c < 0x7f, ValueError, what, ": the token holds a space, a control character or a non-ASCII byte; a store token is ",
             kMinTokenBytes, "-", kMaxTokenBytes, " printable characters (generate one with: openssl rand -hex 32)");
}

std::string read_store_token_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw ValueError(detail::str("token file '", path, "': cannot open it: ", std::strerror(err)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  DP_CHECK(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), ValueError, "token file '", path, "' is not a regular file");
  DP_CHECK(st.st_uid == ::geteuid(), ValueError, "token file '", path, "' belongs to user ", st.st_uid,
           ", not to this user: a job's token must be its owner's alone");
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  DP_CHECK((st.st_mode & 077) == 0, ValueError, "token file '", path, "' can be read by others (mode ", mode, "): chmod 600 '", path,
           "' (like an ssh key, a token must be readable by its owner alone)");
  DP_CHECK(st.st_size <= static_cast<off_t>(kMaxTokenBytes + 64), ValueError, "token file '", path, "' is ", st.st_size,
           " bytes long; a token is at most ", kMaxTokenBytes);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) text.pop_back();
  DP_CHECK(!text.empty(), ValueError, "token file '", path, "' is empty (make one with: (umask 077; openssl rand -hex 32 > '", path, "'))");
  check_store_token(text, "token file '" + path + "'");
  return text;
}

}  // namespace dp::distributed
