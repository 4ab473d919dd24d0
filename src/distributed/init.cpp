// init_process_group and local_address_towards (init.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include "dp/core/errors.h"
#include "dp/distributed/errors.h"
#include "dp/distributed/init.h"

namespace dp::distributed {
namespace {

// The TCPStore at the bottom of a chain of PrefixStores, if that is what `store` is.
const TCPStore* underlying_tcp_store(const Store* store) {
  for (int depth = 0; store != nullptr && depth < 64; ++depth) {
    if (const auto* tcp = dynamic_cast<const TCPStore*>(store)) return tcp;
    const auto* prefix = dynamic_cast<const PrefixStore*>(store);
    store = prefix != nullptr ? prefix->base().get() : nullptr;
  }
  return nullptr;
}

std::mutex g_token_mu;
std::string g_token;  // DP_STORE_TOKEN once read (the variable is then removed)

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return false;
  DP_CHECK(std::strcmp(v, "1") == 0, ValueError, name, "='", v, "' is not 0 or 1");
  return true;
}

// The token in `path`; rank 0 (when it hosts the store) writes a new one there if there is none,
// the other ranks wait for the file until `deadline`.
std::string token_from_file(const std::string& path, bool create, std::chrono::steady_clock::time_point deadline) {
  struct stat st {};
  if (create && ::lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
    // Written under a temporary name and linked into place: a reader sees no file or the whole
    // token, and of two writers the first wins (link fails on an existing name).
    const std::string token = generate_store_token();
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int err = errno;
      throw ValueError(dp::detail::str("token file '", path, "': cannot create it (", tmp, "): ", std::strerror(err)));
    }
    const std::string text = token + "\n";
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    const bool linked = written && ::link(tmp.c_str(), path.c_str()) == 0;
    const int err = errno;
    ::unlink(tmp.c_str());
    if (!written) throw ValueError(dp::detail::str("token file '", path, "': cannot write it"));
    if (!linked && err != EEXIST) throw ValueError(dp::detail::str("token file '", path, "': cannot create it: ", std::strerror(err)));
  }
  while (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
    if (std::chrono::steady_clock::now() >= deadline)
      throw ValueError(dp::detail::str("token file '", path,
                                       "' did not appear in time (rank 0 writes it when it starts the store; is the path on a "
                                       "filesystem every rank sees?)"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return read_store_token_file(path);
}

}  // namespace

std::string store_token_from_environment() {
  std::lock_guard<std::mutex> lock(g_token_mu);
  if (const char* v = std::getenv("DP_STORE_TOKEN"); v != nullptr && *v != '\0') {
    g_token = v;
    // Programs this process starts do not need it (they would inherit it otherwise).
    ::unsetenv("DP_STORE_TOKEN");
  }
  return g_token;
}

ProcessGroupPtr init_process_group(InitOptions options) {
  DP_CHECK(options.backend == "gloo", ValueError, "init_process_group: backend '", options.backend, "' is not available (this build has 'gloo')");
  const std::optional<Environment> env = read_environment();
  const char* how =
      "set RANK and WORLD_SIZE (and MASTER_ADDR, MASTER_PORT for more than one process), start the program with dp-run, torchrun, mpirun or "
      "srun, or pass InitOptions::rank and world_size";
  DP_CHECK(options.world_size || env, ValueError, "init_process_group: the world size is not known: ", how);
  const int world = options.world_size ? *options.world_size : env->world_size;
  DP_CHECK(world >= 1, ValueError, "init_process_group: world size ", world, " is not at least 1");
  DP_CHECK(options.rank || env || world == 1, ValueError, "init_process_group: the rank is not known (world size ", world, "): ", how);
  const int rank = options.rank ? *options.rank : env ? env->rank : 0;
  DP_CHECK(rank >= 0 && rank < world, ValueError, "init_process_group: rank ", rank, " is not in [0, ", world, ")");

  std::shared_ptr<Store> store = options.store;
  ProcessGroupOptions group = options.group;
  if (!store && world == 1) {
    store = std::make_shared<HashStore>(group.timeout);  // nobody to meet
  } else if (!store) {
    const std::string addr = !options.master_addr.empty() ? options.master_addr : env ? env->master_addr : std::string();
    const uint16_t port = options.master_port ? *options.master_port : env ? env->master_port : 0;
    DP_CHECK(!addr.empty(), ValueError, "init_process_group: MASTER_ADDR is not set: a world size of ", world,
             " needs the address of the store (rank 0's host, or the launcher's), or InitOptions::master_addr or store");
    DP_CHECK(port != 0, ValueError, "init_process_group: MASTER_PORT is not set: a world size of ", world,
             " needs the store's port, or InitOptions::master_port or store");
    bool hosted = false;
    if (env) {
      hosted = env->store_hosted;
    } else if (const char* v = std::getenv("DP_STORE_HOSTED")) {
      DP_CHECK(std::strcmp(v, "") == 0 || std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0, ValueError, "DP_STORE_HOSTED='", v,
               "' is not 0 or 1");
      hosted = std::strcmp(v, "1") == 0;
    }
    TCPStoreOptions store_options;
    store_options.is_server = rank == 0 && !hosted;
    store_options.timeout = group.timeout;
    // The caller's options first, then the environment: a token, then a token file.
    const auto file_deadline = std::chrono::steady_clock::now() + group.timeout;
    store_options.token = options.store_token;
    if (store_options.token.empty() && !options.store_token_file.empty())
      store_options.token = token_from_file(options.store_token_file, store_options.is_server, file_deadline);
    if (store_options.token.empty()) store_options.token = store_token_from_environment();
    if (store_options.token.empty())
      if (const char* v = std::getenv("DP_STORE_TOKEN_FILE"); v != nullptr && *v != '\0')
        store_options.token = token_from_file(v, store_options.is_server, file_deadline);
    store_options.insecure = options.insecure_store || env_flag("DP_STORE_INSECURE");
    DP_CHECK(!store_options.token.empty() || store_options.insecure, ValueError, "init_process_group: no store token: the ", world,
             " ranks meet in a TCPStore at ", addr, ":", port,
             ", which must not be open to anyone who can reach that port. Start the job with dp-run (it makes a token and gives it to its "
             "workers), or give every rank the same secret: DP_STORE_TOKEN (e.g. from 'openssl rand -hex 32'), DP_STORE_TOKEN_FILE (a file "
             "of mode 0600 on a filesystem every rank sees: rank 0 writes a new token there if there is none) or InitOptions::store_token; "
             "or, for a throwaway run on a trusted machine only, DP_STORE_INSECURE=1 or InitOptions::insecure_store");
    store_options.server = options.store_server;
    store_options.server.max_wait = group.timeout + std::chrono::milliseconds(10'000);
    store = std::make_shared<TCPStore>(addr, port, store_options);
    if (group.bind_address.empty()) group.bind_address = local_address_towards(addr);
  } else if (group.bind_address.empty()) {
    if (const TCPStore* tcp = underlying_tcp_store(store.get())) group.bind_address = local_address_towards(tcp->host());
  }
  // A launcher that restarts a job on the same store gives each attempt its own key space, so the
  // new attempt's groups never meet the previous one's keys (a half-formed group, old progress).
  if (const char* prefix = std::getenv("DP_STORE_PREFIX"); prefix != nullptr && *prefix != '\0')
    store = std::make_shared<PrefixStore>(prefix, std::move(store));
  return make_gloo_process_group(std::move(store), rank, world, std::move(group));
}

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  // Any port: a UDP connect() only picks the route, nothing is sent.
  if (const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0)
    throw DistributedError(dp::detail::str("local_address_towards: cannot resolve '", host, "': ", ::gai_strerror(rc)));
  std::string error = "no address";
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      ::close(fd);
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = local.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
                                                    : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) {
        ::freeaddrinfo(found);
        return text;
      }
      error = std::strerror(errno);
      continue;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw DistributedError(dp::detail::str("local_address_towards: no route to '", host, "': ", error));
}

}  // namespace dp::distributed
