#pragma once
// Key-value stores for rendezvous and diagnostics (c10d's Store): the ranks of a group meet here,
// exchange addresses, and publish their progress so a timeout can say who is behind.
//
//  - TCPStore: one server (in rank 0, or in the launcher) and a client per rank; works across
//    machines. The default for init_process_group.
//  - FileStore: a file on a filesystem every rank sees (a shared mount, or /tmp on one machine).
//  - HashStore: in one process (ranks as threads: fast tests).
//  - PrefixStore: a namespace in another store, so several groups or restarts share one server.
//
// Semantics (the same for every store):
//  - set(key, value) overwrites; get(key) waits until the key exists (up to timeout()), then
//    returns its value; a key that does not appear in time is a StoreTimeout naming the key.
//  - add(key, delta) treats the value as a decimal integer (absent = 0), adds, returns the sum.
//  - compare_set(key, expected, desired): sets desired when the key's value is `expected` (an
//    absent key matches an empty `expected`); returns the value after the call.
//  - check(keys): true when every key exists, without waiting.
//  - wait(keys[, timeout]): until every key exists; StoreTimeout names the missing ones.
//  - delete_key(key): true when the key existed. num_keys(): how many keys the store holds.
// Every method is thread-safe. Errors are StoreError (dp/distributed/errors.h).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "dp/distributed/errors.h"

namespace dp::distributed {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{60'000};

  explicit Store(std::chrono::milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  virtual Bytes get(const std::string& key) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  // Strings in and out (values are bytes; these copy).
  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 private:
  std::chrono::milliseconds timeout_;
};

// In one process: a map under a mutex and a condition variable.
class HashStore : public Store {
 public:
  explicit HashStore(std::chrono::milliseconds timeout = kDefaultTimeout);
  ~HashStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  using Store::set;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Every key is "<prefix>/<key>" in `base` (num_keys() counts the whole base store, as c10d's).
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  using Store::set;
  const std::shared_ptr<Store>& base() const { return base_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string join(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> join(const std::vector<std::string>& keys) const;
  void wait_prefixed(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// A file that every rank can open (flock-serialised appends of records; readers replay the log).
// Several processes and several FileStore objects in one process may use one path. The file only
// grows (every write is a record) and is never removed by the store: give each job a new path.
class FileStore : public Store {
 public:
  explicit FileStore(std::string path, std::chrono::milliseconds timeout = kDefaultTimeout);
  ~FileStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  using Store::set;
  const std::string& path() const { return path_; }

 private:
  struct State;
  std::string path_;
  std::unique_ptr<State> state_;
};

// The job's secret for TCPStore's authentication (docs/distributed.md, "Security"): 64 hex
// characters of 32 random bytes from the operating system (OpenSSL's RAND_bytes). Every client must
// prove it holds the server's token (HMAC-SHA256 challenge-response) before any other request.
std::string generate_store_token();
// A token as given by a user: 16-1024 bytes of printable ASCII without spaces (an empty one is
// none). ValueError naming `what` (never the token) otherwise.
void check_store_token(const std::string& token, const std::string& what);
// Reads a token file: a regular file owned by this user and not readable by group or others (like
// ssh's keys: chmod 600), holding the token (trailing whitespace ignored). ValueError naming the
// file and the problem otherwise.
std::string read_store_token_file(const std::string& path);

// What a TCPStoreServer accepts. Every limit has a default that a real job never meets; exceeding
// one is an error that names it (an answer to the client, or the connection closed for a client
// that broke the protocol).
struct TCPStoreServerOptions {
  // The job's secret: clients must prove they hold it before any other request. Empty only with
  // `insecure` (a store open to anyone who can reach the port: throwaway runs on a trusted machine).
  std::string token;
  bool insecure = false;
  size_t max_key_bytes = size_t{8} << 10;             // a key (PyTorch's TCPStore: 8 KiB); at most 64 KiB
  size_t max_value_bytes = size_t{8} << 20;           // a value (PyTorch's: 8 MiB); at most 64 MiB
  size_t max_keys_per_request = size_t{128} << 10;    // keys of one check/wait (PyTorch's: 128 Ki)
  size_t max_total_bytes = size_t{1} << 30;           // keys and values held (a set beyond is refused)
  size_t max_parked_keys = size_t{1} << 20;           // keys that parked get/wait requests wait for, together
  size_t max_connections = 16384;                     // authenticated clients at once
  size_t max_unauthenticated = 256;                   // connections still in the handshake (the oldest goes first)
  std::chrono::milliseconds handshake_timeout{5000};  // to complete the handshake after connecting
  // A parked get/wait is answered "timed out" after at most this (the job's timeout and some).
  std::chrono::milliseconds max_wait{std::chrono::minutes(30)};
  // Refused clients (a wrong or missing token, a request before the handshake), once per peer
  // address and reason: one line each, without a trailing newline. Empty: written to stderr as
  // "dp::distributed::TCPStoreServer: ...".
  std::function<void(const std::string&)> log;
};

// The server half of TCPStore: a thread that serves clients on host:port (port 0 = any free port;
// port() tells which). Destroying it stops the thread and closes every connection. dp-run hosts
// one; TCPStore hosts one itself when is_server is true.
class TCPStoreServer {
 public:
  // host: the address to listen on ("" or "0.0.0.0" = every interface, "::" for IPv6). Without a
  // token (and without options.insecure) a ValueError: a store must not be open to anyone.
  TCPStoreServer(const std::string& host, uint16_t port, TCPStoreServerOptions options);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;
  uint16_t port() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct TCPStoreOptions {
  bool is_server = false;                                      // host a TCPStoreServer on `port` in this process (rank 0)
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;  // every operation, and connecting
  // The server: the clients retry connecting until `timeout` (the server may start after them).
  // The job's token (the server's, or the one this client proves it holds), and `insecure` for an
  // open store (then the client also refuses a server that asks for a token it does not have). With
  // is_server, both go to the server too.
  std::string token;
  bool insecure = false;
  // With is_server: the server's limits (its token and insecure come from the two fields above).
  TCPStoreServerOptions server;
  // How long a request rides out a network problem: when the server does not answer or the
  // connection breaks without the server refusing (a cut, not a stopped server), the client
  // reconnects and sends the request again until this much time has passed since the failure
  // began. 0: the first such failure is the request's error. add() is never sent twice (its outcome
  // is then unknown: a StoreError says so); every other request is idempotent.
  std::chrono::milliseconds retry_for{0};
};

// A client of a TCPStoreServer at host:port (and, with is_server, that server itself). One
// connection; requests are serialised on it, so a get()/wait() that waits holds up the object's
// other threads: a thread that waits while others write (a watchdog) wants its own TCPStore.
// A lost server is a StoreError naming host:port, at once and for every later request; a server
// that does not answer in time is a StoreTimeout (get/wait: their timeout plus 2 s of grace). A
// client given "" or "0.0.0.0" ("::") as host connects to 127.0.0.1 (::1). Keys and values are
// bounded by the server's limits (8 KiB and 8 MiB by default), which it announces when the client
// connects: a larger one is a ValueError before anything is sent. Connecting includes the
// authentication: a server that does not hold the token, or refuses this client's, is a StoreError.
class TCPStore : public Store {
 public:
  TCPStore(std::string host, uint16_t port, TCPStoreOptions options = {});
  ~TCPStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  using Store::set;
  const std::string& host() const { return host_; }
  uint16_t port() const;  // the server's port (the one chosen, when started with port 0)

 private:
  struct State;
  std::string host_;
  std::unique_ptr<State> state_;
};

}  // namespace dp::distributed
