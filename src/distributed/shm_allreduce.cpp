// Allreduce through a shared-memory segment (shm_allreduce.h).
#include "distributed/shm_allreduce.h"
#include <fcntl.h>
#include <gloo/common/error.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include "distributed/gloo_reduce.h"
#include "distributed/tcp_store_protocol.h"
#include "dp/core/errors.h"
#include "dp/distributed/errors.h"

namespace dp::distributed::detail {
namespace {

constexpr uint64_t kMagic = 0x6470'7368'6d31'0001ULL;  // "dpshm1" + version
constexpr size_t kDefaultSlotBytes = size_t{4} << 20;  // per rank and slot set: buffers above are chunked
constexpr size_t kMinSlotBytes = size_t{64} << 10;
constexpr auto kSleepSlice = std::chrono::milliseconds(20);  // how often a sleeping waiter looks at its peers
constexpr int kSpins = 64;                                   // polls before sleeping

// Per rank: its last arrival, whether it left, and its process id. One cache line each, so ranks
// announcing arrivals do not contend on a line.
struct alignas(64) RankControl {
  std::atomic<uint32_t> arrived{0};
  std::atomic<uint32_t> aborted{0};
  int32_t pid = 0;
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  return line;
}

std::string namespace_id(const char* name) {
  char buf[128];
  const std::string path = std::string("/proc/self/ns/") + name;
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

bool shm_enabled() {
  const char* v = std::getenv("DP_SHM");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

// Whether rank a's arrival counter has reached `phase` (counters wrap: compare the difference).
bool reached(uint32_t arrived, uint32_t phase) { return static_cast<int32_t>(arrived - phase) >= 0; }

std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// The segment's layout for `size` ranks with `slot` bytes per slot.
struct Layout {
  size_t controls;  // offset of RankControl[size]
  size_t data;      // offset of the two slot sets
  size_t total;
};

}  // namespace

struct ShmChannel::Header {
  uint64_t magic;
  uint32_t size;
  uint32_t reserved;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  alignas(64) std::atomic<uint32_t> wake;      // futex word: bumped by every arrival and abort
  alignas(64) std::atomic<uint32_t> sleepers;  // ranks asleep on `wake` (an arrival wakes only if any)
};

namespace {

Layout layout_for(int size, size_t slot) {
  Layout l{};
  l.controls = round_up(sizeof(ShmChannel::Header), 64);
  l.data = round_up(l.controls + sizeof(RankControl) * static_cast<size_t>(size), 4096);
  l.total = l.data + 2 * static_cast<size_t>(size) * slot;
  return l;
}

RankControl* controls(void* base, int size) { return reinterpret_cast<RankControl*>(static_cast<uint8_t*>(base) + layout_for(size, 0).controls); }

// The slot size that fits /dev/shm's free space four times over, or 0 when even the minimum does not.
size_t choose_slot_bytes(int size, std::string* why) {
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0) {
    *why = std::string("/dev/shm: ") + std::strerror(errno);
    return 0;
  }
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  size_t slot = kDefaultSlotBytes;
  while (slot >= kMinSlotBytes && layout_for(size, slot).total * 4 > free_bytes) slot /= 2;
  if (slot < kMinSlotBytes) {
    *why = dp::detail::str("/dev/shm has ", free_bytes >> 10, " KiB free, too little for ", size, " ranks");
    return 0;
  }
  return slot;
}

std::string random_name() {
  uint8_t raw[16];
  tcp_store::random_bytes(raw, sizeof raw);
  static const char* hex = "0123456789abcdef";
  std::string name = "/dp-shm-";
  for (uint8_t b : raw) {
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  return name;
}

// Maps an open segment of exactly `total` bytes; nullptr (and *why) on failure.
void* map_segment(int fd, size_t total, std::string* why) {
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *why = std::string("mmap: ") + std::strerror(errno);
    return nullptr;
  }
  return p;
}

// Rank 0: creates, reserves and initialises the segment. Returns its name (empty on failure).
std::string create_segment(int size, void** base, size_t* total, std::string* why) {
  const size_t slot = choose_slot_bytes(size, why);
  if (slot == 0) return {};
  const Layout l = layout_for(size, slot);
  const std::string name = random_name();
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = std::string("shm_open: ") + std::strerror(errno);
    return {};
  }
  // fallocate reserves the pages now: a full /dev/shm fails here, not as a SIGBUS on first touch.
  const int rc = ::ftruncate(fd, static_cast<off_t>(l.total)) == 0 ? ::posix_fallocate(fd, 0, static_cast<off_t>(l.total)) : errno;
  if (rc != 0) {
    *why = std::string("reserving ") + std::to_string(l.total >> 10) + " KiB in /dev/shm: " + std::strerror(rc);
    ::close(fd);
    ::shm_unlink(name.c_str());
    return {};
  }
  void* p = map_segment(fd, l.total, why);
  ::close(fd);
  if (p == nullptr) {
    ::shm_unlink(name.c_str());
    return {};
  }
  auto* h = new (p) ShmChannel::Header{};
  h->size = static_cast<uint32_t>(size);
  h->slot_bytes = slot;
  h->total_bytes = l.total;
  for (int r = 0; r < size; ++r) new (controls(p, size) + r) RankControl{};
  h->magic = kMagic;
  *base = p;
  *total = l.total;
  return name;
}

// Ranks other than 0: opens and checks the segment rank 0 made.
void* open_segment(const std::string& name, int size, size_t* total, std::string* why) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::string("shm_open: ") + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::getuid() || (st.st_mode & 077) != 0) {
    *why = "the segment is not this user's private object";
    ::close(fd);
    return nullptr;
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < layout_for(size, kMinSlotBytes).total) {
    *why = dp::detail::str("the segment has ", bytes, " bytes, too few for ", size, " ranks");
    ::close(fd);
    return nullptr;
  }
  void* p = map_segment(fd, bytes, why);
  ::close(fd);
  if (p == nullptr) return nullptr;
  const auto* h = static_cast<const ShmChannel::Header*>(p);
  if (h->magic != kMagic || h->size != static_cast<uint32_t>(size) || h->total_bytes != bytes || h->slot_bytes > kDefaultSlotBytes ||
      layout_for(size, h->slot_bytes).total != bytes) {
    *why = "the segment's header does not match this group";
    ::munmap(p, bytes);
    return nullptr;
  }
  *total = bytes;
  return p;
}

int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

std::string shm_host_identity() {
  const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  std::string id = boot;
  for (const char* ns : {"mnt", "ipc", "net", "pid"}) {
    const std::string n = namespace_id(ns);
    if (n.empty() || boot.empty()) return {};
    id += " " + n;
  }
  return id + " uid:" + std::to_string(::getuid());
}

std::unique_ptr<ShmChannel> ShmChannel::connect(Store& store, int rank, int size, std::chrono::milliseconds timeout, std::string* why) {
  std::string reason;
  auto say = [&](std::string r) {
    if (why != nullptr) *why = std::move(r);
    return nullptr;
  };
  if (size <= 1) return say("one rank");
  const std::string identity = shm_enabled() ? shm_host_identity() : std::string("-");
  store.set("shm/id/" + std::to_string(rank), to_bytes(identity));

  void* base = nullptr;
  size_t total = 0;
  std::string name;
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("shm/id/" + std::to_string(r));
    store.wait(keys, timeout);
    bool same = !identity.empty() && identity != "-";
    for (int r = 1; r < size && same; ++r) same = to_string(store.get(keys[static_cast<size_t>(r)])) == identity;
    if (!same) reason = identity == "-" ? "DP_SHM=0" : "the ranks are not all on this host (or DP_SHM=0 on one)";
    if (same) name = create_segment(size, &base, &total, &reason);
    store.set("shm/name", to_bytes(name.empty() ? "-" + reason : name));
    if (name.empty()) return say(reason);
  } else {
    store.wait({"shm/name"}, timeout);
    const std::string published = to_string(store.get("shm/name"));
    if (!published.empty() && published[0] == '-') return say(published.substr(1));
    name = published;
    base = open_segment(name, size, &total, &reason);
  }
  // Each rank says whether it could map the segment; rank 0 removes the name once all have tried,
  // and all follow its decision, so no rank uses the channel while another uses TCP.
  if (base != nullptr) controls(base, size)[rank].pid = static_cast<int32_t>(::getpid());
  store.set("shm/ack/" + std::to_string(rank), to_bytes(base != nullptr ? "1" : "0" + reason));
  std::string decision;
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("shm/ack/" + std::to_string(r));
    store.wait(keys, timeout);
    ::shm_unlink(name.c_str());
    decision = "1";
    for (int r = 0; r < size; ++r) {
      const std::string ack = to_string(store.get(keys[static_cast<size_t>(r)]));
      if (ack != "1") {
        decision = dp::detail::str("0rank ", r, ": ", ack.substr(std::min<size_t>(1, ack.size())));
        break;
      }
    }
    store.set("shm/decision", to_bytes(decision));
  } else {
    store.wait({"shm/decision"}, timeout);
    decision = to_string(store.get("shm/decision"));
  }
  if (decision != "1") {
    if (base != nullptr) ::munmap(base, total);
    return say(decision.substr(std::min<size_t>(1, decision.size())));
  }
  std::vector<int> pidfds(static_cast<size_t>(size), -1);
  const int self = static_cast<int>(::getpid());
  for (int r = 0; r < size; ++r) {
    const int pid = controls(base, size)[r].pid;
    if (r != rank && pid != self) pidfds[static_cast<size_t>(r)] = open_pidfd(pid);
  }
  return std::unique_ptr<ShmChannel>(new ShmChannel(rank, size, base, total, std::move(pidfds)));
}

ShmChannel::ShmChannel(int rank, int size, void* base, size_t bytes, std::vector<int> pidfds)
    : rank_(rank), size_(size), base_(base), bytes_(bytes), header_(static_cast<Header*>(base)), pidfds_(std::move(pidfds)) {
  slot_bytes_ = header_->slot_bytes;
}

ShmChannel::~ShmChannel() {
  abort();
  for (int fd : pidfds_)
    if (fd >= 0) ::close(fd);
  ::munmap(base_, bytes_);
}

uint8_t* ShmChannel::slot(int set, int r) const {
  const size_t index = static_cast<size_t>(set) * static_cast<size_t>(size_) + static_cast<size_t>(r);
  return static_cast<uint8_t*>(base_) + layout_for(size_, 0).data + index * slot_bytes_;
}

void ShmChannel::abort() noexcept {
  if (aborted_) return;
  aborted_ = true;
  controls(base_, size_)[rank_].aborted.store(1, std::memory_order_seq_cst);
  header_->wake.fetch_add(1, std::memory_order_seq_cst);
  futex(&header_->wake, FUTEX_WAKE, INT_MAX, nullptr);
}

void ShmChannel::arrive(uint32_t phase) {
  controls(base_, size_)[rank_].arrived.store(phase, std::memory_order_release);
  header_->wake.fetch_add(1, std::memory_order_seq_cst);
  if (header_->sleepers.load(std::memory_order_seq_cst) > 0) futex(&header_->wake, FUTEX_WAKE, INT_MAX, nullptr);
}

void ShmChannel::check_peers() {
  RankControl* c = controls(base_, size_);
  // Exits first: a peer that aborted because a third rank died must not hide that death.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const int fd = pidfds_[static_cast<size_t>(r)];
    bool exited = false;
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      exited = ::poll(&p, 1, 0) > 0;
    } else if (c[r].pid != static_cast<int32_t>(::getpid())) {
      exited = ::kill(c[r].pid, 0) != 0 && errno == ESRCH;
    }
    if (exited) throw ShmPeerLost(dp::detail::str("pid ", c[r].pid, ", shared memory): its process exited"), r);
  }
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && c[r].aborted.load(std::memory_order_acquire) != 0)
      throw ShmPeerLost("shared memory): it left the channel (it failed or closed its process group)", r);
}

void ShmChannel::wait_all(uint32_t phase, std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout) {
  RankControl* c = controls(base_, size_);
  auto all_arrived = [&] {
    for (int r = 0; r < size_; ++r)
      if (!reached(c[r].arrived.load(std::memory_order_acquire), phase)) return false;
    return true;
  };
  for (int i = 0; i < kSpins; ++i) {
    if (all_arrived()) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  for (;;) {
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = header_->wake.load(std::memory_order_seq_cst);
    if (all_arrived()) {
      header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      std::string missing;
      for (int r = 0; r < size_; ++r)
        if (!reached(c[r].arrived.load(std::memory_order_acquire), phase)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw gloo::IoException(dp::detail::str("Timed out waiting ", timeout.count(), "ms in the shared-memory allreduce for rank(s) ", missing));
    }
    const auto slice = std::min<std::chrono::nanoseconds>(kSleepSlice, deadline - now);
    timespec ts{static_cast<time_t>(slice.count() / 1'000'000'000), static_cast<long>(slice.count() % 1'000'000'000)};
    futex(&header_->wake, FUTEX_WAIT, seen, &ts);
    header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (all_arrived()) return;
    check_peers();
  }
}

void ShmChannel::allreduce(void* data, size_t count, DType wire, ReduceOp op, std::chrono::milliseconds timeout) {
  if (size_ == 1 || count == 0) return;
  if (aborted_) throw DistributedError("shared-memory allreduce: this rank's channel was closed after an error");
  const ReduceFn fn = reduce_function(wire, op);
  const size_t es = element_size(wire);
  const size_t chunk_elems = slot_bytes_ / es;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto* bytes = static_cast<uint8_t*>(data);
  std::vector<size_t> bound(static_cast<size_t>(size_) + 1);
  const size_t me = static_cast<size_t>(rank_);
  for (size_t off = 0; off < count; off += chunk_elems) {
    const size_t n = std::min(chunk_elems, count - off);
    // Rank j reduces elements [bound[j], bound[j + 1]) of this chunk; bounds on 64-byte lines.
    const size_t line = std::max<size_t>(1, 64 / es);
    for (size_t j = 0; j <= static_cast<size_t>(size_); ++j)
      bound[j] = j == static_cast<size_t>(size_) ? n : std::min(n, n * j / static_cast<size_t>(size_) / line * line);
    const int set = static_cast<int>(chunks_ % 2);
    uint8_t* src = bytes + off * es;
    uint8_t* mine = slot(set, rank_);
    // 1. Publish what the others reduce (everything but this rank's own part).
    std::memcpy(mine, src, bound[me] * es);
    std::memcpy(mine + bound[me + 1] * es, src + bound[me + 1] * es, (n - bound[me + 1]) * es);
    arrive(++phase_);
    wait_all(phase_, deadline, timeout);
    // 2. Reduce this rank's part, in rank order, into the caller's buffer, and publish the result.
    const size_t lo = bound[me], len = bound[me + 1] - bound[me];
    if (len > 0) {
      for (int r = 0; r < size_; ++r)
        if (r != rank_) fn(src + lo * es, src + lo * es, slot(set, r) + lo * es, len);
      std::memcpy(mine + lo * es, src + lo * es, len * es);
    }
    arrive(++phase_);
    wait_all(phase_, deadline, timeout);
    // 3. Take the others' reduced parts. The next chunk uses the other slot set, so nobody
    //    overwrites these before every rank has passed step 2 of that chunk (after finishing this one).
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const size_t a = bound[static_cast<size_t>(r)], b = bound[static_cast<size_t>(r) + 1];
      std::memcpy(src + a * es, slot(set, r) + a * es, (b - a) * es);
    }
    ++chunks_;
  }
}

}  // namespace dp::distributed::detail
