// Fashion-MNIST's IDX files, read with zlib.
//
// IDX format (http://yann.lecun.com/exdb/mnist/): a big-endian header, magic 0x00000803 for
// unsigned-byte images with 3 dimensions (count, rows, cols) and 0x00000801 for labels with one
// (count), followed by the bytes, row-major. The payload is read with one large gzread() (zlib
// inflates straight into the destination) and converted in one tight loop. A header announcing
// more data than the file could hold is rejected before anything is allocated.
#include "dp/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dp/ops/factory.h"

namespace dp::data {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr int64_t kNumClasses = 10;
constexpr size_t kChunk = size_t{1} << 30;       // bytes per gzread call (its length is an unsigned int)

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

// A gzFile that closes itself; every failure is an IOError naming the file.
class GzReader {
 public:
  explicit GzReader(std::string path) : path_(std::move(path)) {
    errno = 0;
    f_ = gzopen(path_.c_str(), "rb");
    DP_CHECK(f_ != nullptr, IOError, "FashionMNIST: cannot open ", path_, ": ",
             errno != 0 ? std::strerror(errno) : "out of memory", ". ", kInstallHint);
    gzbuffer(f_, 1u << 18);
  }
  ~GzReader() {
    if (f_) gzclose(f_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  const std::string& path() const { return path_; }

  // Reads up to n bytes; returns how many were read (fewer only at the end of the data). A corrupt
  // gzip stream is an IOError; a gzip stream cut short just ends early (truncated() tells).
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      const auto want = static_cast<unsigned>(std::min(n - got, kChunk));
      const int r = gzread(f_, static_cast<char*>(dst) + got, want);
      if (r < 0) {
        int errnum = 0;
        std::string msg = gzerror(f_, &errnum) ? gzerror(f_, &errnum) : "";
        if (msg.rfind(path_ + ": ", 0) == 0) msg.erase(0, path_.size() + 2);  // zlib prefixes the path
        DP_CHECK(false, IOError, "FashionMNIST: ", path_, " is not a valid gzip file or is corrupt (zlib: ",
                 msg.empty() ? "read error" : msg, ")");
      }
      got += static_cast<size_t>(r);
      if (static_cast<unsigned>(r) < want) break;
    }
    return got;
  }
  // After a short read: whether zlib saw the gzip stream end in the middle.
  bool truncated_stream() {
    int errnum = 0;
    gzerror(f_, &errnum);
    return errnum == Z_BUF_ERROR;
  }

 private:
  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t read_be32(GzReader& in, const char* what, size_t header_bytes, size_t offset) {
  unsigned char b[4];
  const size_t got = in.read(b, 4);
  DP_CHECK(got == 4, IOError, "FashionMNIST: ", in.path(), " is truncated: it ends after ", offset + got, " of the ",
           header_bytes, " header bytes (while reading the ", what, ")");
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

void check_magic(const GzReader& in, uint32_t magic, uint32_t expected, const char* kind) {
  DP_CHECK(magic == expected, IOError, "FashionMNIST: ", in.path(), " has magic number ", hex32(magic), ", expected ",
           hex32(expected), " (IDX ", kind, "); not a Fashion-MNIST ", kind, " file, or not an IDX file at all");
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
}

// Deflate expands at most 1032:1, so a file of `file_bytes` cannot hold more than this.
void check_plausible(const GzReader& in, size_t expected, const std::string& announced) {
  std::error_code ec;
  const auto file_bytes = static_cast<size_t>(std::filesystem::file_size(in.path(), ec));
  if (ec) return;  // size unknown (a pipe?): the read itself will tell
  const size_t limit = file_bytes * 1100 + 4096;
  DP_CHECK(expected <= limit, IOError, "FashionMNIST: ", in.path(), " is truncated: the header announces ", announced, " (",
           expected, " bytes), more than a ", file_bytes, "-byte file can hold");
}

Tensor read_labels(const std::string& path) {
  GzReader in(path);
  check_magic(in, read_be32(in, "magic number", 8, 0), kLabelsMagic, "label");
  const uint32_t n = read_be32(in, "label count", 8, 4);
  const std::string announced = std::to_string(n) + " labels";
  check_plausible(in, n, announced);
  std::vector<uint8_t> raw(n);
  read_payload(in, raw.data(), n, announced);
  Tensor labels = empty({static_cast<int64_t>(n)}, kInt64);
  int64_t* out = labels.data_ptr<int64_t>();
  uint8_t worst = 0;
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = raw[i];
    worst = std::max(worst, raw[i]);
  }
  if (worst >= kNumClasses) {
    const auto it = std::find_if(raw.begin(), raw.end(), [](uint8_t v) { return v >= kNumClasses; });
    DP_CHECK(false, IOError, "FashionMNIST: ", path, " has label ", int(*it), " at index ", it - raw.begin(),
             "; Fashion-MNIST labels are 0..", kNumClasses - 1);
  }
  return labels;
}

Tensor read_images(const std::string& path, int64_t expected_count, const std::string& labels_path) {
  GzReader in(path);
  check_magic(in, read_be32(in, "magic number", 16, 0), kImagesMagic, "image");
  const uint32_t n = read_be32(in, "image count", 16, 4);
  const uint32_t rows = read_be32(in, "row count", 16, 8);
  const uint32_t cols = read_be32(in, "column count", 16, 12);
  DP_CHECK(rows == FashionMNIST::kRows && cols == FashionMNIST::kCols, IOError, "FashionMNIST: ", path, " holds images of ",
           rows, "x", cols, " pixels, expected ", FashionMNIST::kRows, "x", FashionMNIST::kCols);
  DP_CHECK(n == expected_count, IOError, "FashionMNIST: ", path, " holds ", n, " images but ", labels_path, " holds ",
           expected_count, " labels; the files must describe the same samples");
  const size_t pixels = size_t{n} * rows * cols;
  const std::string announced = std::to_string(n) + " images of " + std::to_string(rows) + "x" + std::to_string(cols);
  check_plausible(in, pixels, announced);
  Tensor images = empty({static_cast<int64_t>(n), 1, rows, cols}, kFloat32);
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

FashionMNIST::FashionMNIST(const std::string& root, bool train) : train_(train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string labels_path = resolve(root, prefix + "-labels-idx1-ubyte");
  const std::string images_path = resolve(root, prefix + "-images-idx3-ubyte");
  Tensor labels = read_labels(labels_path);
  Tensor images = read_images(images_path, labels.size(0), labels_path);
  set_tensors(std::move(images), std::move(labels));
}

}  // namespace dp::data
