// FileStore: an append-only log in one file that every rank opens. The file starts with a magic
// header; then records, each [kind 'S' (set) or 'D' (delete)][u32 key length][u32 value length]
// [key][value], little-endian. Writers append under an exclusive flock(); readers take a shared
// one and replay only what was appended since their last read into a cache. add() and
// compare_set() decide under the exclusive lock, so they are atomic across processes.
//
// A writer that died mid-append leaves a torn record at the end: readers stop before it, and the
// next writer cuts it off before appending. Every lock and every wait gives up at the timeout.
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include "distributed/socket.h"
#include "distributed/store_common.h"
#include "dp/distributed/store.h"

namespace dp::distributed {

namespace {

using net::Clock;
using std::chrono::milliseconds;

constexpr char kMagic[8] = {'D', 'P', 'F', 'S', 'T', 'O', 'R', '1'};
constexpr size_t kRecordHeader = 9;
constexpr uint8_t kSetRecord = 'S';
constexpr uint8_t kDeleteRecord = 'D';
// wait/get look at the file again after 1 ms, then 2, 4, 8, and every 10 ms.
constexpr milliseconds kFirstPoll{1};
constexpr milliseconds kMaxPoll{10};

uint32_t read_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

struct FileStore::State {
  std::string path;
  std::string name;  // "FileStore '<path>'" in messages
  net::Fd fd;
  std::mutex mu;  // the cache, the offset, and this object's use of the file lock
  std::unordered_map<std::string, Bytes> cache;
  uint64_t offset = 0;  // the file's bytes [0, offset) are replayed into cache

  [[noreturn]] void fail(const std::string& what, int err) { throw StoreError(detail::str(name, ": ", what, ": ", net::errno_text(err))); }

  // flock() bounded by a deadline (a process that stopped while holding it must not hang us).
  class Lock {
   public:
    Lock(State& s, int operation, Clock::time_point deadline, milliseconds timeout) : fd_(s.fd.get()) {
      auto sleep = std::chrono::microseconds(50);
      for (;;) {
        if (::flock(fd_, operation | LOCK_NB) == 0) return;
        const int err = errno;
        if (err == EINTR) continue;
        if (err != EWOULDBLOCK) s.fail("cannot lock the file", err);
        const auto now = Clock::now();
        if (now >= deadline)
          throw StoreError(
              detail::str(s.name, ": could not lock the file within ", timeout.count(), " ms: another process holds the lock (stopped or hung?)"));
        std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
        sleep = std::min(sleep * 2, std::chrono::microseconds(2000));
      }
    }
    ~Lock() { ::flock(fd_, LOCK_UN); }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_;
  };

  uint64_t file_size() {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) fail("cannot stat the file", errno);
    return static_cast<uint64_t>(st.st_size);
  }

  // Replays the records appended since `offset` (the caller holds a file lock and mu). Returns the
  // file's size: more than `offset` afterwards only when a torn record ends the file.
  uint64_t replay() {
    const uint64_t size = file_size();
    if (size < offset) {  // the file was replaced or cut by someone else: start over
      cache.clear();
      offset = 0;
    }
    if (size == offset) return size;
    Bytes buf(size - offset);
    for (size_t done = 0; done < buf.size();) {
      const ssize_t n = ::pread(fd.get(), buf.data() + done, buf.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("cannot read the file", errno);
      if (n == 0) {  // shorter than fstat said (cut meanwhile): use what was read
        buf.resize(done);
        break;
      }
      done += static_cast<size_t>(n);
    }
    size_t pos = 0;
    if (offset == 0) {
      if (buf.size() < sizeof kMagic) return size;  // an empty file, or a header being written
      if (std::memcmp(buf.data(), kMagic, sizeof kMagic) != 0)
        throw StoreError(detail::str(name,
                                     ": the file is not a FileStore file (it does not start with the FileStore "
                                     "header); use a new path or remove it"));
      pos = sizeof kMagic;
    }
    while (buf.size() - pos >= kRecordHeader) {
      const uint8_t kind = buf[pos];
      const uint64_t key_size = read_u32(&buf[pos + 1]);
      const uint64_t value_size = read_u32(&buf[pos + 5]);
      if (kind != kSetRecord && kind != kDeleteRecord)
        throw StoreError(detail::str(name, ": the file is corrupt at byte ", offset + pos, " (record kind ", int(kind), ")"));
      if (buf.size() - pos - kRecordHeader < key_size + value_size) break;  // torn: its writer died
      const auto* key = reinterpret_cast<const char*>(&buf[pos + kRecordHeader]);
      const uint8_t* value = &buf[pos + kRecordHeader + key_size];
      std::string k(key, key_size);
      if (kind == kSetRecord)
        cache[std::move(k)] = Bytes(value, value + value_size);
      else
        cache.erase(k);
      pos += kRecordHeader + key_size + value_size;
    }
    offset += pos;
    return size;
  }

  // Replays under a shared lock, taken only when the file has grown (a cheap fstat otherwise).
  void refresh(Clock::time_point deadline, milliseconds timeout) {
    if (file_size() == offset) return;
    Lock lock(*this, LOCK_SH, deadline, timeout);
    replay();
  }

  // Appends a record (the caller holds the exclusive lock and mu and has just replayed, so
  // `offset` is where valid records end) and applies it to the cache.
  void append(uint8_t kind, const std::string& key, const Bytes& value, uint64_t size) {
    DP_CHECK(key.size() <= UINT32_MAX && value.size() <= UINT32_MAX, ValueError, name, ": key '", key.substr(0, 64), "' or its value (", value.size(),
             " bytes) is 4 GiB or more");
    if (size > offset && ::ftruncate(fd.get(), static_cast<off_t>(offset)) != 0) fail("cannot cut a torn record off the file", errno);
    Bytes rec;
    rec.reserve(sizeof kMagic + kRecordHeader + key.size() + value.size());
    if (offset == 0) rec.insert(rec.end(), kMagic, kMagic + sizeof kMagic);
    rec.push_back(kind);
    put_u32(rec, static_cast<uint32_t>(key.size()));
    put_u32(rec, static_cast<uint32_t>(value.size()));
    rec.insert(rec.end(), key.begin(), key.end());
    rec.insert(rec.end(), value.begin(), value.end());
    for (size_t done = 0; done < rec.size();) {
      const ssize_t n = ::pwrite(fd.get(), rec.data() + done, rec.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        [[maybe_unused]] int r = ::ftruncate(fd.get(), static_cast<off_t>(offset));  // leave no torn record behind
        fail("cannot write the file", err);
      }
      done += static_cast<size_t>(n);
    }
    offset += rec.size();
    if (kind == kSetRecord)
      cache[key] = value;
    else
      cache.erase(key);
  }

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!cache.count(k)) return false;
    return true;
  }

  // Waits (polling the file) until every key exists; StoreTimeout names the missing ones. Returns
  // the value of keys[0] when `fetch` (get), read under the same lock as the check.
  Bytes wait_for(const std::vector<std::string>& keys, milliseconds timeout, bool fetch) {
    const auto deadline = net::deadline_after(timeout);
    milliseconds sleep = kFirstPoll;
    for (;;) {
      {
        std::lock_guard<std::mutex> guard(mu);
        refresh(deadline, timeout);
        if (has_all(keys)) return fetch ? cache.at(keys[0]) : Bytes{};
        if (Clock::now() >= deadline) {
          std::vector<std::string> missing;
          for (const auto& k : keys)
            if (!cache.count(k)) missing.push_back(k);
          throw_store_timeout(name, missing, timeout);
        }
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - Clock::now()));
      sleep = std::min(sleep * 2, kMaxPoll);
    }
  }
};

FileStore::FileStore(std::string path, milliseconds timeout) : Store(timeout), path_(std::move(path)), state_(std::make_unique<State>()) {
  state_->path = path_;
  state_->name = "FileStore '" + path_ + "'";
  state_->fd.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
  if (!state_->fd.valid()) {
    const int err = errno;
    throw StoreError(detail::str(state_->name, ": cannot open the file: ", net::errno_text(err),
                                 " (the directory must exist and every rank must be able to write it)"));
  }
  // Reading it now reports a file that is not a store at once, not at the first get.
  std::lock_guard<std::mutex> guard(state_->mu);
  state_->refresh(net::deadline_after(timeout), timeout);
}

FileStore::~FileStore() = default;

void FileStore::set(const std::string& key, const Bytes& value) {
  const auto deadline = net::deadline_after(timeout());
  std::lock_guard<std::mutex> guard(state_->mu);
  State::Lock lock(*state_, LOCK_EX, deadline, timeout());
  const uint64_t size = state_->replay();
  state_->append(kSetRecord, key, value, size);
}

Bytes FileStore::get(const std::string& key) { return state_->wait_for({key}, timeout(), /*fetch=*/true); }

int64_t FileStore::add(const std::string& key, int64_t delta) {
  const auto deadline = net::deadline_after(timeout());
  std::lock_guard<std::mutex> guard(state_->mu);
  State::Lock lock(*state_, LOCK_EX, deadline, timeout());
  const uint64_t size = state_->replay();
  auto it = state_->cache.find(key);
  const int64_t now = it == state_->cache.end() ? 0 : parse_counter(key, it->second);
  int64_t sum;
  DP_CHECK(!__builtin_add_overflow(now, delta, &sum), ValueError, "Store::add: key '", key, "' holds ", now, "; adding ", delta, " overflows int64");
  state_->append(kSetRecord, key, counter_bytes(sum), size);
  return sum;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  const auto deadline = net::deadline_after(timeout());
  std::lock_guard<std::mutex> guard(state_->mu);
  State::Lock lock(*state_, LOCK_EX, deadline, timeout());
  const uint64_t size = state_->replay();
  auto it = state_->cache.find(key);
  if (it == state_->cache.end() && !expected.empty()) return expected;  // as HashStore: left absent
  if (it != state_->cache.end() && it->second != expected) return it->second;
  state_->append(kSetRecord, key, desired, size);
  return desired;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> guard(state_->mu);
  state_->refresh(net::deadline_after(timeout()), timeout());
  return state_->has_all(keys);
}

void FileStore::wait(const std::vector<std::string>& keys, milliseconds timeout) { state_->wait_for(keys, timeout, false); }

bool FileStore::delete_key(const std::string& key) {
  const auto deadline = net::deadline_after(timeout());
  std::lock_guard<std::mutex> guard(state_->mu);
  State::Lock lock(*state_, LOCK_EX, deadline, timeout());
  const uint64_t size = state_->replay();
  if (!state_->cache.count(key)) return false;
  state_->append(kDeleteRecord, key, {}, size);
  return true;
}

int64_t FileStore::num_keys() {
  std::lock_guard<std::mutex> guard(state_->mu);
  state_->refresh(net::deadline_after(timeout()), timeout());
  return static_cast<int64_t>(state_->cache.size());
}

}  // namespace dp::distributed
