// Fashion-MNIST's IDX files, read with zlib.
//
// IDX format (http://yann.lecun.com/exdb/mnist/): a big-endian header, magic 0x00000803 for
// unsigned-byte images with 3 dimensions (count, rows, cols) and 0x00000801 for labels with one
// (count), followed by the bytes, row-major. The payload is inflated by zlib straight into the
// destination and converted in one tight loop. A header announcing more data than the file could
// hold is rejected before anything is allocated; a gzip file must be one complete member (CRC-32
// and length checked) with nothing after it.
#include "dp/data/fashion_mnist.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "dp/ops/factory.h"

namespace dp::data {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr int64_t kNumClasses = 10;
constexpr size_t kChunk = size_t{1} << 30;  // bytes per gzread call (its length is an unsigned int)

const char* const kInstallHint =
    "Fashion-MNIST is installed by Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist, "
    "which puts it in /usr/share/datasets/fashion-mnist), or pass the directory holding the IDX files as root";

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// <root>/<name>.gz, or <root>/<name> when only the uncompressed file exists (gzread reads plain
// files too).
std::string resolve(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(root) / (name + ".gz");
  const fs::path plain = fs::path(root) / name;
  std::error_code ec;
  if (!fs::exists(gz, ec) && fs::exists(plain, ec)) return plain.string();
  DP_CHECK(fs::exists(gz, ec), IOError, "FashionMNIST: ", gz.string(), " does not exist. ", kInstallHint);
  return gz.string();
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// One IDX file, plain or gzip-compressed (told by the gzip magic bytes, not the name). Opened
// without blocking (O_NONBLOCK: a FIFO would wait for a writer) and refused unless it is a regular
// file; a gzip file must be exactly one gzip member, whose trailer (CRC-32 and length) zlib checks,
// with nothing after it. Every failure is an IOError naming the file.
class IdxFile {
 public:
  explicit IdxFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) {
      const int err = errno;
      DP_CHECK(false, IOError, "FashionMNIST: cannot open ", path_, ": ", errno_text(err), ". ", kInstallHint);
    }
    try {
      init();
    } catch (...) {  // the destructor does not run for a constructor that throws
      ::close(fd_);
      fd_ = -1;
      throw;
    }
  }
  void init() {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot stat the file", errno);
    DP_CHECK(S_ISREG(st.st_mode), IOError, "FashionMNIST: ", path_, " is not a regular file (",
             S_ISDIR(st.st_mode)    ? "a directory"
             : S_ISFIFO(st.st_mode) ? "a FIFO"
                                    : "a device or socket",
             ")");
    file_bytes_ = static_cast<uint64_t>(st.st_size);
    unsigned char magic[2] = {0, 0};
    const size_t got = raw_read(magic, 2);
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) {
      in_.resize(size_t{1} << 18);
      in_[0] = magic[0];
      in_[1] = magic[1];
      zs_.next_in = in_.data();
      zs_.avail_in = 2;
      if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) DP_CHECK(false, OutOfMemory, "FashionMNIST: ", path_, ": zlib could not start (out of memory)");
      z_open_ = true;
    } else {
      pending_.assign(magic, magic + got);
    }
  }
  ~IdxFile() {
    if (z_open_) inflateEnd(&zs_);
    if (fd_ >= 0) ::close(fd_);
  }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  const std::string& path() const { return path_; }
  bool compressed() const { return gzip_; }
  uint64_t file_bytes() const { return file_bytes_; }

  // Reads up to n bytes of the (decompressed) content; fewer only at its end. A corrupt gzip
  // stream (bad data, CRC or length) is an IOError; a stream cut short just ends early
  // (truncated_stream() tells).
  size_t read(void* dst, size_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    size_t got = 0;
    if (!gzip_) {
      while (got < n && !pending_.empty()) {
        out[got++] = pending_.front();
        pending_.erase(pending_.begin());
      }
      return got + raw_read(out + got, n - got);
    }
    while (got < n && !ended_) {
      if (zs_.avail_in == 0 && !eof_) {
        const size_t r = raw_read(in_.data(), in_.size());
        if (r == 0) eof_ = true;
        zs_.next_in = in_.data();
        zs_.avail_in = static_cast<uInt>(r);
      }
      const auto want = static_cast<uInt>(std::min<size_t>(n - got, kChunk));
      zs_.next_out = out + got;
      zs_.avail_out = want;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      got += want - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        ended_ = true;
        break;
      }
      if (rc == Z_BUF_ERROR && eof_ && zs_.avail_in == 0) {  // no more input, member not finished
        cut_ = true;
        break;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        DP_CHECK(rc != Z_MEM_ERROR, OutOfMemory, "FashionMNIST: ", path_, ": zlib ran out of memory");
        DP_CHECK(false, IOError, "FashionMNIST: ", path_, " is not a valid gzip file or is corrupt (zlib: ", zs_.msg ? zs_.msg : "data error", ")");
      }
    }
    return got;
  }
  // After a short read: whether the gzip stream ended in the middle (its trailer included).
  bool truncated_stream() const { return cut_; }

  // After the content was read: the gzip member must be complete (its trailer, checked by zlib:
  // CRC-32 and length) and nothing may follow it.
  void check_end(const std::string& announced) {
    if (!gzip_) return;
    if (!ended_) {
      unsigned char extra;
      const size_t more = read(&extra, 1);
      DP_CHECK(more == 0, IOError, "FashionMNIST: ", path_, " has data after the ", announced,
               " its header announces (corrupt header or wrong file)");
      DP_CHECK(ended_, IOError, "FashionMNIST: ", path_,
               " is truncated: the gzip stream is cut short (its trailer, with the CRC-32 and "
               "length, is missing or incomplete)");
    }
    unsigned char b;
    const bool trailing = zs_.avail_in > 0 || raw_read(&b, 1) > 0;
    DP_CHECK(!trailing, IOError, "FashionMNIST: ", path_,
             " has bytes after the end of its gzip stream (trailing garbage, or a second "
             "gzip member, which a Fashion-MNIST file does not have)");
  }

 private:
  [[noreturn]] void fail(const std::string& what, int err) const {
    DP_CHECK(false, IOError, "FashionMNIST: ", path_, ": ", what, ": ", errno_text(err));
    std::abort();  // not reached
  }
  size_t raw_read(void* dst, size_t n) {
    auto* p = static_cast<char*>(dst);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd_, p + got, std::min(n - got, kChunk));
      if (r < 0) {
        if (errno == EINTR) continue;
        fail("read failed", errno);
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

  std::string path_;
  int fd_ = -1;
  uint64_t file_bytes_ = 0;
  bool gzip_ = false, z_open_ = false, eof_ = false, ended_ = false, cut_ = false;
  z_stream zs_{};
  std::vector<unsigned char> in_;
  std::vector<unsigned char> pending_;  // bytes read to tell the format, not yet delivered
};
using GzReader = IdxFile;

uint32_t read_be32(GzReader& in, const char* what, size_t header_bytes, size_t offset) {
  unsigned char b[4];
  const size_t got = in.read(b, 4);
  DP_CHECK(got == 4, IOError, "FashionMNIST: ", in.path(), " is truncated: it ends after ", offset + got, " of the ", header_bytes,
           " header bytes (while reading the ", what, ")");
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

void check_magic(const GzReader& in, uint32_t magic, uint32_t expected, const char* kind) {
  DP_CHECK(magic == expected, IOError, "FashionMNIST: ", in.path(), " has magic number ", hex32(magic), ", expected ", hex32(expected), " (IDX ",
           kind, "); not a Fashion-MNIST ", kind, " file, or not an IDX file at all");
}

// Reads exactly `expected` payload bytes into dst, then checks that nothing follows. Callers first
// check plausible() so a corrupt header cannot make them allocate more than the file can hold.
void read_payload(GzReader& in, uint8_t* dst, size_t expected, const std::string& announced) {
  const size_t have = in.read(dst, expected);
  if (have < expected) {
    const bool cut = in.truncated_stream();
    DP_CHECK(false, IOError, "FashionMNIST: ", in.path(), " is truncated: the header announces ", announced, " (", expected,
             " bytes) but the data ends after ", have, " bytes", cut ? " (the gzip stream itself is cut short)" : "");
  }
  unsigned char extra;
  DP_CHECK(in.read(&extra, 1) == 0, IOError, "FashionMNIST: ", in.path(), " has data after the ", announced,
           " its header announces (corrupt header or wrong file)");
  in.check_end(announced);
}

// How much a file can hold: an uncompressed one its own size less the header, a gzip one at most
// 1032 times its size (deflate's largest expansion). A header announcing more is a truncated or
// corrupt file, refused before anything is allocated.
void check_plausible(const GzReader& in, size_t header_bytes, size_t expected, const std::string& announced) {
  const uint64_t file_bytes = in.file_bytes();
  const uint64_t limit = in.compressed() ? file_bytes * 1032 : (file_bytes > header_bytes ? file_bytes - header_bytes : 0);
  DP_CHECK(expected <= limit, IOError, "FashionMNIST: ", in.path(), " is truncated: the header announces ", announced, " (", expected,
           " bytes), more than a ", file_bytes, "-byte ", in.compressed() ? "gzip" : "uncompressed", " file can hold");
}

// Allocations sized by a file: an out-of-memory error names the file.
template <typename F>
auto allocate_for(const GzReader& in, const std::string& announced, F&& f) {
  try {
    return f();
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(::dp::detail::str("FashionMNIST: ", in.path(), ": not enough memory for the ", announced, " its header announces: ", e.what()));
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(::dp::detail::str("FashionMNIST: ", in.path(), ": not enough memory for the ", announced, " its header announces"));
  }
}

Tensor read_labels(const std::string& path) {
  GzReader in(path);
  check_magic(in, read_be32(in, "magic number", 8, 0), kLabelsMagic, "label");
  const uint32_t n = read_be32(in, "label count", 8, 4);
  DP_CHECK(n > 0, IOError, "FashionMNIST: ", path, " holds 0 labels: a data set needs at least one sample");
  const std::string announced = std::to_string(n) + " labels";
  check_plausible(in, 8, n, announced);
  std::vector<uint8_t> raw = allocate_for(in, announced, [&] { return std::vector<uint8_t>(n); });
  read_payload(in, raw.data(), n, announced);
  Tensor labels = allocate_for(in, announced, [&] { return empty({static_cast<int64_t>(n)}, kInt64); });
  int64_t* out = labels.data_ptr<int64_t>();
  uint8_t worst = 0;
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = raw[i];
    worst = std::max(worst, raw[i]);
  }
  if (worst >= kNumClasses) {
    const auto it = std::find_if(raw.begin(), raw.end(), [](uint8_t v) { return v >= kNumClasses; });
    DP_CHECK(false, IOError, "FashionMNIST: ", path, " has label ", int(*it), " at index ", it - raw.begin(), "; Fashion-MNIST labels are 0..",
             kNumClasses - 1);
  }
  return labels;
}

Tensor read_images(const std::string& path, int64_t expected_count, const std::string& labels_path) {
  GzReader in(path);
  check_magic(in, read_be32(in, "magic number", 16, 0), kImagesMagic, "image");
  const uint32_t n = read_be32(in, "image count", 16, 4);
  const uint32_t rows = read_be32(in, "row count", 16, 8);
  const uint32_t cols = read_be32(in, "column count", 16, 12);
  DP_CHECK(rows == FashionMNIST::kRows && cols == FashionMNIST::kCols, IOError, "FashionMNIST: ", path, " holds images of ", rows, "x", cols,
           " pixels, expected ", FashionMNIST::kRows, "x", FashionMNIST::kCols);
  DP_CHECK(n == expected_count, IOError, "FashionMNIST: ", path, " holds ", n, " images but ", labels_path, " holds ", expected_count,
           " labels; the files must describe the same samples");
  const size_t pixels = size_t{n} * rows * cols;
  const std::string announced = std::to_string(n) + " images of " + std::to_string(rows) + "x" + std::to_string(cols);
  check_plausible(in, 16, pixels, announced);
  Tensor images = allocate_for(in, announced, [&] { return empty({static_cast<int64_t>(n), 1, rows, cols}, kFloat32); });
  // The bytes are inflated straight into the last quarter of the float buffer and widened in
  // place, front to back, through a small stack buffer: block [i, i+B) writes bytes [4i, 4i+4B),
  // which ends at or before 3N+i+B, where the unread input resumes (since i+B <= N). This avoids
  // a second 47 MB buffer and its page faults.
  float* out = images.data_ptr<float>();
  uint8_t* raw = reinterpret_cast<uint8_t*>(out) + 3 * pixels;
  read_payload(in, raw, pixels, announced);
  constexpr size_t kBlock = 4096;
  alignas(64) uint8_t block[kBlock];
  for (size_t i = 0; i < pixels; i += kBlock) {
    const size_t len = std::min(kBlock, pixels - i);
    std::memcpy(block, raw + i, len);
    float* dst = out + i;
    // float(x) / 255 is what torchvision's ToTensor computes (img.float().div(255)); vectorises.
    for (size_t k = 0; k < len; ++k) dst[k] = static_cast<float>(block[k]) / 255.0f;
  }
  return images;
}

}  // namespace

namespace detail {
Tensor read_idx_labels(const std::string& path) { return read_labels(path); }
Tensor read_idx_images(const std::string& path, int64_t expected_count, const std::string& labels_path) {
  return read_images(path, expected_count, labels_path);
}
}  // namespace detail

FashionMNIST::FashionMNIST(const std::string& root, bool train) : train_(train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string labels_path = resolve(root, prefix + "-labels-idx1-ubyte");
  const std::string images_path = resolve(root, prefix + "-images-idx3-ubyte");
  Tensor labels = read_labels(labels_path);
  Tensor images = read_images(images_path, labels.size(0), labels_path);
  set_tensors(std::move(images), std::move(labels));
}

}  // namespace dp::data
