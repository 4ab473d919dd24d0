#pragma once
// A language-modelling dataset over a file of token ids (nanoGPT's train.bin / val.bin: the ids of
// the whole corpus, back to back, as little-endian uint16, or uint32 for vocabularies over 65536),
// memory-mapped, not read: opening a 10 GB file costs no memory and sample i touches only its
// window's pages.
//
//   dp::data::TokenFileDataset train("train.bin", /*block_size=*/256,
//                                    dp::data::TokenFileOptions().stride(1).vocab_size(65));
//   dp::data::DataLoader loader(train, dp::data::DataLoaderOptions(64).shuffle(true).num_workers(2));
//   for (dp::data::Batch& b : loader) { /* b.data, b.target: int64 [64, 256] */ }
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "dp/data/dataset.h"

namespace dp::data {

// The width of the ids in a token file. Both are little-endian (numpy's default on x86 and ARM).
enum class TokenDType : uint8_t { UInt16, UInt32 };
// "uint16" / "uint32"; 2 / 4.
const char* token_dtype_name(TokenDType dtype);
size_t token_dtype_size(TokenDType dtype);

// Chainable options: TokenFileOptions().dtype(TokenDType::UInt32).stride(1).vocab_size(50257).
struct TokenFileOptions {
  // The file's id width (default uint16, nanoGPT's np.uint16).
  TokenFileOptions& dtype(TokenDType v) {
    dtype_ = v;
    return *this;
  }
  // Tokens between the starts of consecutive samples (>= 1). 0, the default, means block_size:
  // windows that do not overlap (each token is a target once per epoch). stride(1) gives every
  // start position, so a shuffled DataLoader draws windows as nanoGPT's get_batch does (without
  // replacement within an epoch).
  TokenFileOptions& stride(int64_t v) {
    stride_ = v;
    return *this;
  }
  // When > 0, every id in the file is checked once, at open, to be below it (the model's
  // embedding size); 0 (default): not checked.
  TokenFileOptions& vocab_size(int64_t v) {
    vocab_size_ = v;
    return *this;
  }

  TokenDType dtype() const { return dtype_; }
  int64_t stride() const { return stride_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  TokenDType dtype_ = TokenDType::UInt16;
  int64_t stride_ = 0;
  int64_t vocab_size_ = 0;
};

namespace detail {
class TokenFileMap;  // the read-only shared mapping of one file (src/data/token_file_dataset.cpp)
}

// Sample i is the window of block_size + 1 tokens that starts at token i * stride:
//   data   = tokens[s, s + block_size)       int64 [block_size]
//   target = tokens[s + 1, s + block_size + 1)  int64 [block_size]   (the next token at each place)
// There are (num_tokens - block_size - 1) / stride + 1 samples; a tail shorter than a stride is
// not visited. get_batch() writes a whole batch ([B, block_size] each) in one pass over the windows,
// with no per-sample tensor. Samples are read-only views of the file's pages, so any number of
// DataLoader workers may read at once; copies of the dataset share one mapping, unmapped when the
// last copy is destroyed (the file descriptor is closed as soon as the file is mapped).
//
// Errors, at construction, each an IOError naming the file: it is missing or unreadable, not a
// regular file (a directory, FIFO or device), empty, its size is not a multiple of the id width, it
// holds fewer than block_size + 1 tokens, or (with vocab_size) an id is >= vocab_size (the message
// names the first such id and its position). Bad arguments (block_size < 1, stride < 0,
// vocab_size < 0) are ValueErrors.
// The file must not be truncated while mapped: reading a page that no longer exists kills the
// process with SIGBUS, as for any mmap reader (replacing the file with rename, as writers of token
// files do, is safe: the mapping keeps the old file).
class TokenFileDataset : public Dataset {
 public:
  TokenFileDataset(const std::string& path, int64_t block_size, TokenFileOptions options = TokenFileOptions());

  Example get(size_t index) override;
  size_t size() const override { return size_; }
  Example get_batch(const std::vector<int64_t>& indices) override;

  // Tokens [start, start + length) as int64 [length] (a prompt, a validation span); IndexError
  // outside the file.
  Tensor tokens(int64_t start, int64_t length) const;

  const std::string& path() const { return path_; }
  int64_t block_size() const { return block_size_; }
  int64_t stride() const { return stride_; }
  TokenDType dtype() const { return dtype_; }
  int64_t vocab_size() const { return vocab_size_; }  // 0 when not checked
  int64_t num_tokens() const { return num_tokens_; }

 private:
  std::string path_;
  int64_t block_size_;
  int64_t stride_;
  TokenDType dtype_;
  int64_t vocab_size_;
  int64_t num_tokens_ = 0;
  size_t size_ = 0;
  std::shared_ptr<const detail::TokenFileMap> map_;
};

}  // namespace dp::data
