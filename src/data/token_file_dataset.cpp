// TokenFileDataset: a read-only shared mapping of a token-id file, windows copied out as int64.
#include "dp/data/token_file_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <string>
#include <system_error>
#include "dp/ops/factory.h"

namespace dp::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian: a big-endian host needs byte swapping");

const char* token_dtype_name(TokenDType dtype) { return dtype == TokenDType::UInt32 ? "uint32" : "uint16"; }
size_t token_dtype_size(TokenDType dtype) { return dtype == TokenDType::UInt32 ? 4 : 2; }

namespace detail {

// One file mapped PROT_READ / MAP_SHARED: every copy of the dataset and every worker reads the same
// pages of the page cache. The descriptor is closed once mapped; the mapping lives until destroyed.
class TokenFileMap {
 public:
  TokenFileMap(const std::string& path, size_t bytes, int fd) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      DP_CHECK(err != ENOMEM, OutOfMemory, "TokenFileDataset: '", path, "': cannot map its ", bytes,
               " bytes (no address space left): ", std::error_code(err, std::generic_category()).message());
      DP_CHECK(false, IOError, "TokenFileDataset: '", path, "': cannot map the file: ", std::error_code(err, std::generic_category()).message());
    }
    addr_ = p;
  }
  ~TokenFileMap() { ::munmap(addr_, bytes_); }
  TokenFileMap(const TokenFileMap&) = delete;
  TokenFileMap& operator=(const TokenFileMap&) = delete;

  const void* data() const { return addr_; }

 private:
  void* addr_ = nullptr;
  size_t bytes_;
};

}  // namespace detail

namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// Closes a descriptor on every path out of the constructor.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The first id >= vocab (its position), or -1. One vectorised max per chunk; the position is
// looked for only in the chunk that has one.
template <typename T>
int64_t first_out_of_vocab(const T* tokens, int64_t n, int64_t vocab) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = std::min(n, begin + kChunk);
    T worst = 0;
    for (int64_t i = begin; i < end; ++i) worst = std::max(worst, tokens[i]);
    if (static_cast<int64_t>(worst) < vocab) continue;
    for (int64_t i = begin; i < end; ++i)
      if (static_cast<int64_t>(tokens[i]) >= vocab) return i;
  }
  return -1;
}

// The windows of `starts` into data / target rows of `block` int64s each (rows k of both).
template <typename T>
void copy_windows(const T* tokens, const int64_t* starts, size_t count, int64_t block, int64_t* data, int64_t* target) {
  for (size_t k = 0; k < count; ++k) {
    const T* src = tokens + starts[k];
    int64_t* d = data + static_cast<int64_t>(k) * block;
    int64_t* t = target + static_cast<int64_t>(k) * block;
    for (int64_t j = 0; j < block; ++j) d[j] = src[j];
    for (int64_t j = 0; j < block; ++j) t[j] = src[j + 1];
  }
}

template <typename T>
void copy_span(const T* tokens, int64_t length, int64_t* out) {
  for (int64_t j = 0; j < length; ++j) out[j] = tokens[j];
}

}  // namespace

TokenFileDataset::TokenFileDataset(const std::string& path, int64_t block_size, TokenFileOptions options)
    : path_(path),
      block_size_(block_size),
      stride_(options.stride() == 0 ? block_size : options.stride()),
      dtype_(options.dtype()),
      vocab_size_(options.vocab_size()) {
  DP_CHECK(block_size >= 1, ValueError, "TokenFileDataset: block_size must be at least 1, got ", block_size, " (opening '", path, "')");
  DP_CHECK(options.stride() >= 0, ValueError, "TokenFileDataset: stride must be at least 1 (or 0 for block_size), got ", options.stride(),
           " (opening '", path, "')");
  DP_CHECK(vocab_size_ >= 0, ValueError, "TokenFileDataset: vocab_size must be positive (or 0: unchecked), got ", vocab_size_, " (opening '", path,
           "')");
  // O_NONBLOCK: a FIFO would otherwise wait for a writer before it could be refused.
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) {
    const int err = errno;
    DP_CHECK(false, IOError, "TokenFileDataset: cannot open '", path, "': ", errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    const int err = errno;
    DP_CHECK(false, IOError, "TokenFileDataset: cannot stat '", path, "': ", errno_text(err));
  }
  DP_CHECK(S_ISREG(st.st_mode), IOError, "TokenFileDataset: '", path, "' is not a regular file (",
           S_ISDIR(st.st_mode)    ? "a directory"
           : S_ISFIFO(st.st_mode) ? "a FIFO"
                                  : "a device or socket",
           ")");
  const auto bytes = static_cast<uint64_t>(st.st_size);
  const uint64_t need = static_cast<uint64_t>(block_size) + 1;  // tokens per sample (no overflow at INT64_MAX)
  const size_t width = token_dtype_size(dtype_);
  const char* name = token_dtype_name(dtype_);
  DP_CHECK(bytes > 0, IOError, "TokenFileDataset: '", path, "' is empty: a token file holds at least block_size + 1 = ", need, " ", name,
           " token ids");
  DP_CHECK(bytes % width == 0, IOError, "TokenFileDataset: '", path, "' has ", bytes, " bytes, not a multiple of ", width, " (the size of a ", name,
           " token id): truncated, or not a ", name, " token file (is dtype right?)");
  num_tokens_ = static_cast<int64_t>(bytes / width);
  DP_CHECK(num_tokens_ > block_size, IOError, "TokenFileDataset: '", path, "' holds ", num_tokens_, " ", name,
           " tokens, fewer than the block_size + 1 = ", need, " that one sample needs");
  size_ = static_cast<size_t>((num_tokens_ - block_size - 1) / stride_ + 1);
  map_ = std::make_shared<const detail::TokenFileMap>(path, static_cast<size_t>(bytes), fd.fd);

  if (vocab_size_ > 0) {
    const int64_t bad = dtype_ == TokenDType::UInt32
                            ? first_out_of_vocab(static_cast<const uint32_t*>(map_->data()), num_tokens_, vocab_size_)
                            : (vocab_size_ > 0xffff ? -1 : first_out_of_vocab(static_cast<const uint16_t*>(map_->data()), num_tokens_, vocab_size_));
    if (bad >= 0) {
      const int64_t id =
          dtype_ == TokenDType::UInt32 ? static_cast<const uint32_t*>(map_->data())[bad] : static_cast<const uint16_t*>(map_->data())[bad];
      DP_CHECK(false, IOError, "TokenFileDataset: '", path, "' has token id ", id, " at position ", bad, " (byte offset ",
               bad * static_cast<int64_t>(width), "), not below vocab_size ", vocab_size_,
               ": the file was written with another vocabulary, or is not a ", name, " token file");
    }
  }
}

Example TokenFileDataset::get(size_t index) {
  DP_CHECK(index < size_, IndexError, "TokenFileDataset::get: index ", index, " is out of range for a dataset of size ", size_, " ('", path_, "')");
  Example out = get_batch({static_cast<int64_t>(index)});
  out.data = out.data.view({block_size_});
  out.target = out.target.view({block_size_});
  return out;
}

Example TokenFileDataset::get_batch(const std::vector<int64_t>& indices) {
  DP_CHECK(!indices.empty(), ValueError, "TokenFileDataset::get_batch: cannot make a batch of 0 samples");
  std::vector<int64_t> starts(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    DP_CHECK(i >= 0 && static_cast<size_t>(i) < size_, IndexError, "TokenFileDataset::get_batch: index ", i,
             " is out of range for a dataset of size ", size_, " ('", path_, "')");
    starts[k] = i * stride_;
  }
  const auto count = static_cast<int64_t>(indices.size());
  Tensor data = empty({count, block_size_}, kInt64), target = empty({count, block_size_}, kInt64);
  if (dtype_ == TokenDType::UInt32)
    copy_windows(static_cast<const uint32_t*>(map_->data()), starts.data(), starts.size(), block_size_, data.data_ptr<int64_t>(),
                 target.data_ptr<int64_t>());
  else
    copy_windows(static_cast<const uint16_t*>(map_->data()), starts.data(), starts.size(), block_size_, data.data_ptr<int64_t>(),
                 target.data_ptr<int64_t>());
  return Example{std::move(data), std::move(target)};
}

Tensor TokenFileDataset::tokens(int64_t start, int64_t length) const {
  DP_CHECK(start >= 0 && length >= 0 && start <= num_tokens_ && length <= num_tokens_ - start, IndexError, "TokenFileDataset::tokens: [", start, ", ",
           start, " + ", length, ") is outside the ", num_tokens_, " tokens of '", path_, "'");
  Tensor out = empty({length}, kInt64);
  if (dtype_ == TokenDType::UInt32)
    copy_span(static_cast<const uint32_t*>(map_->data()) + start, length, out.data_ptr<int64_t>());
  else
    copy_span(static_cast<const uint16_t*>(map_->data()) + start, length, out.data_ptr<int64_t>());
  return out;
}

}  // namespace dp::data
