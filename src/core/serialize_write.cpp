// save(): the safetensors writer. Atomic replace: everything goes to a unique temporary file next to
// the destination (same filesystem, so rename is atomic), which is fsync'ed, renamed over the
// destination, and the directory fsync'ed so the rename itself survives a crash. Any failure before
// the rename removes the temporary file and leaves the previous file untouched.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>
#include <stdexcept>
#include <system_error>
#include <vector>
#include <nlohmann/json.hpp>
#include "dp/core/serialize.h"

namespace dp {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian: a big-endian host needs byte swapping");

namespace detail {
namespace {
thread_local SaveFault tls_save_fault;
}  // namespace
void set_save_fault(const SaveFault& fault) { tls_save_fault = fault; }

std::string temp_file_host_tag() {
  static const std::string tag = [] {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    uint32_t h = 2166136261u;  // FNV-1a
    for (const char* p = host; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 16777619u;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", h);
    return std::string(buf);
  }();
  return tag;
}
void clear_save_fault() { tls_save_fault = SaveFault{}; }
}  // namespace detail

namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// `op` names the caller in messages: "save" for checkpoints, write_file_atomic's own for the rest.
[[noreturn]] void io_fail(const char* op, const std::string& path, const std::string& what, int err) {
  throw IOError(detail::str(op, ": '", path, "': cannot ", what, ": ", errno_text(err), " (errno ", err, ")"));
}

// A JSON string literal as serde_json writes it (UTF-8 kept, only '"', '\\' and control characters
// escaped): nlohmann's dump() escapes exactly that set. Rejects invalid UTF-8, which JSON can't hold.
std::string json_string(const std::string& s, const std::string& path, const char* what) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    throw ValueError(detail::str("save: ", what, " is not valid UTF-8 (saving '", path, "')"));
  }
}

struct Entry {
  const std::string* name;
  Tensor tensor;
  DType dtype;
  uint64_t nbytes;
};

// The header JSON exactly as the reference serializes it, padded with spaces to a multiple of 8.
std::string build_header(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata, const std::string& path) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ',';
      first = false;
      h += json_string(k, path, detail::str("metadata key '", k, "'").c_str());
      h += ':';
      h += json_string(v, path, detail::str("metadata value of '", k, "'").c_str());
    }
    h += '}';
    if (!entries.empty()) h += ',';
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (i > 0) h += ',';
    h += json_string(*e.name, path, detail::str("tensor name '", *e.name, "'").c_str());
    h += ":{\"dtype\":\"";
    h += detail::safetensors_dtype_name(e.dtype);
    h += "\",\"shape\":[";
    for (size_t d = 0; d < e.tensor.sizes().size(); ++d) {
      if (d > 0) h += ',';
      h += std::to_string(e.tensor.sizes()[d]);
    }
    h += "],\"data_offsets\":[";
    h += std::to_string(offset);
    h += ',';
    offset += e.nbytes;
    h += std::to_string(offset);
    h += "]}";
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');  // tensor data starts 8-byte aligned
  return h;
}

// Where the bytes end up: the destination itself, or the target of a symlink (so the link is kept
// and its target replaced). Refuses to replace something that is not a regular file (a directory,
// a device such as /dev/null): renaming over it would destroy it.
struct Destination {
  const char* op = "save";  // who writes, for the messages
  std::string path;         // the file to replace
  std::string dir;          // its directory (for the temporary file and the directory fsync)
  std::string base;
  bool exists = false;
  mode_t mode = 0;
};

Destination resolve_destination(const std::string& path, const char* op = "save") {
  DP_CHECK(!path.empty(), ValueError, op, ": empty path");
  Destination d;
  d.op = op;
  d.path = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    if (char* real = ::realpath(path.c_str(), nullptr)) {  // dangling links are simply replaced
      d.path = real;
      std::free(real);
    }
  }
  if (::stat(d.path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      throw IOError(
          detail::str(op, ": '", path, "': cannot replace it: it exists and is not a regular file", S_ISDIR(st.st_mode) ? " (a directory)" : ""));
    d.exists = true;
    d.mode = st.st_mode & 07777;
  } else if (errno != ENOENT) {
    io_fail(op, path, "check the destination", errno);
  }
  size_t slash = d.path.find_last_of('/');
  d.dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : d.path.substr(0, slash));
  d.base = slash == std::string::npos ? d.path : d.path.substr(slash + 1);
  DP_CHECK(!d.base.empty(), ValueError, op, ": '", path, "' names a directory, not a file");
  return d;
}

// Stale temporary files of earlier saves to the same destination: a writer killed mid-save (kill -9,
// a crash, a power cut) leaves its ".<name>.tmp.<host>-<pid>.<n>.<hex>" behind. Removed are only
// names of exactly that pattern (or the older ".<name>.tmp.<pid>.<n>.<hex>") written on this host
// (the host tag; another machine sharing the directory has its own pids) by a process that no
// longer exists. A live writer's file, another rank's on this host included, and this process's own
// (another thread may be saving) are kept. Best effort: errors are ignored.
bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
bool all_hex(std::string_view s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}
void remove_stale_temporaries(const Destination& dest) {
  const std::string prefix = "." + dest.base.substr(0, 100) + ".tmp.";
  const std::string host = detail::temp_file_host_tag();
  std::error_code ec;
  std::filesystem::directory_iterator it(dest.dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string_view rest(name);
    rest.remove_prefix(prefix.size());
    // [<host>-]<pid>.<counter>.<8 hex>
    const size_t dot1 = rest.find('.');
    if (dot1 == std::string_view::npos) continue;
    std::string_view who = rest.substr(0, dot1), tail = rest.substr(dot1 + 1);
    const size_t dot2 = tail.find('.');
    if (dot2 == std::string_view::npos || !all_digits(tail.substr(0, dot2)) || !all_hex(tail.substr(dot2 + 1), 8)) continue;
    if (const size_t dash = who.find('-'); dash != std::string_view::npos) {
      if (who.substr(0, dash) != host) continue;  // another machine's writer
      who.remove_prefix(dash + 1);
    }
    if (!all_digits(who) || who.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(std::string(who)));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to signal: alive)
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    ::unlink(it->path().c_str());
  }
}

// The temporary file: created exclusively with a name no other thread or process uses, removed by the
// destructor unless commit() renamed it into place.
class TempFile {
 public:
  explicit TempFile(const Destination& dest) : dest_(dest) {
    static std::atomic<uint64_t> counter{0};
    thread_local std::mt19937_64 rng{std::random_device{}()};
    // Hidden, and short enough that a long destination name can't overflow NAME_MAX.
    std::string stem = dest.base.substr(0, 100);
    const std::string host = detail::temp_file_host_tag();
    for (int attempt = 0; attempt < 100; ++attempt) {
      char suffix[96];
      std::snprintf(suffix, sizeof suffix, ".tmp.%s-%d.%llu.%08llx", host.c_str(), static_cast<int>(::getpid()),
                    static_cast<unsigned long long>(counter.fetch_add(1)), static_cast<unsigned long long>(rng() & 0xffffffffu));
      tmp_ = (dest.dir == "/" ? "/" : dest.dir + "/") + "." + stem + suffix;
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) break;
      if (errno != EEXIST) io_fail(dest.op, dest.path, detail::str("create a temporary file in directory '", dest.dir, "'"), errno);
    }
    if (fd_ < 0) io_fail(dest.op, dest.path, detail::str("create a temporary file in directory '", dest.dir, "'"), EEXIST);
    // Replacing a file keeps its permissions (a new one gets 0666 minus the umask, as open() does).
    if (dest.exists && ::fchmod(fd_, dest.mode) != 0) {
      int err = errno;
      ::close(fd_);  // the destructor does not run for a constructor that throws
      ::unlink(tmp_.c_str());
      fd_ = -1;
      committed_ = true;
      fail("setting the permissions of the temporary file", err);
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    if (n >= kBufferSize / 2) {  // large tensors go straight from their memory to the kernel
      flush();
      raw_write(p, n);
      return;
    }
    if (buffer_.size() + n > kBufferSize) flush();
    buffer_.insert(buffer_.end(), p, p + n);
  }

  void commit() {
    flush();
    if (::fsync(fd_) != 0) fail("fsync of the temporary file", errno);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close of the temporary file", errno);  // NFS reports write errors here
    if (::rename(tmp_.c_str(), dest_.path.c_str()) != 0) fail(detail::str("rename of the temporary file to '", dest_.path, "'"), errno);
    committed_ = true;
    // Make the rename durable. Some filesystems can't fsync a directory (EINVAL): nothing to do then.
    int dfd = ::open(dest_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) io_fail(dest_.op, dest_.path, detail::str("open directory '", dest_.dir, "' to fsync it (the file was written)"), errno);
    int rc = ::fsync(dfd), err = errno;
    ::close(dfd);
    if (rc != 0 && err != EINVAL && err != EROFS)
      io_fail(dest_.op, dest_.path, detail::str("fsync directory '", dest_.dir, "' (the file was written)"), err);
  }

 private:
  static constexpr size_t kBufferSize = size_t(1) << 20;

  [[noreturn]] void fail(const std::string& what, int err) {
    throw IOError(detail::str(dest_.op, ": '", dest_.path, "': ", what, " failed after ", written_, " bytes were written (temporary file '", tmp_,
                              "' removed): ", errno_text(err), " (errno ", err, ")"));
  }

  void flush() {
    if (buffer_.empty()) return;
    raw_write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  void raw_write(const char* p, size_t n) {
    const detail::SaveFault& fault = detail::tls_save_fault;
    while (n > 0) {
      size_t chunk = std::min<size_t>(n, size_t(1) << 30);
      if (fault.after_bytes >= 0) {  // test hook: behave like a disk that fills up after K bytes
        uint64_t allowed = static_cast<uint64_t>(fault.after_bytes) > written_ ? static_cast<uint64_t>(fault.after_bytes) - written_ : 0;
        if (allowed == 0) {
          if (fault.throw_exception) throw std::runtime_error("injected failure in the middle of save");
          fail("write", fault.error);
        }
        chunk = std::min<size_t>(chunk, allowed);
      }
      ssize_t r = ::write(fd_, p, chunk);
      if (r < 0) {
        if (errno == EINTR) continue;
        fail("write", errno);
      }
      if (r == 0) fail("write (no progress)", EIO);
      p += r;
      n -= static_cast<size_t>(r);
      written_ += static_cast<uint64_t>(r);
    }
  }

  Destination dest_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
  std::vector<char> buffer_;
};

}  // namespace

void save(const OrderedDict<std::string, Tensor>& tensors, const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  for (const auto& item : tensors) {
    const Tensor& t = item.value();
    DP_CHECK(item.key() != "__metadata__", ValueError,
             "save: '__metadata__' is reserved by the safetensors format and cannot name a tensor (saving '", path, "')");
    DP_CHECK(t.defined(), ValueError, "save: tensor '", item.key(), "' is undefined (saving '", path, "')");
    entries.push_back(Entry{&item.key(), t, t.dtype(), static_cast<uint64_t>(t.nbytes())});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    int ra = detail::safetensors_dtype_rank(a.dtype), rb = detail::safetensors_dtype_rank(b.dtype);
    if (ra != rb) return ra > rb;
    return *a.name < *b.name;
  });
  const std::string header = build_header(entries, metadata, path);

  Destination dest = resolve_destination(path);
  remove_stale_temporaries(dest);
  TempFile file(dest);
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  file.write(len, 8);
  file.write(header.data(), header.size());
  for (const Entry& e : entries) {
    if (e.nbytes == 0) continue;
    // One tensor at a time on the host, without autograd history.
    Tensor h = e.tensor.detach();
    if (!h.device().is_cpu()) h = h.to(Device::cpu());
    if (!h.is_contiguous()) h = h.contiguous();
    file.write(h.data_ptr(), e.nbytes);
  }
  file.commit();
}

namespace detail {

void write_file_atomic(const std::string& path, std::string_view bytes, const char* op) {
  Destination dest = resolve_destination(path, op);
  remove_stale_temporaries(dest);
  TempFile file(dest);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace detail

}  // namespace dp
