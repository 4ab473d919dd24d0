#pragma once
// A character-level tokenizer (nanoGPT's shakespeare_char): the vocabulary is the distinct
// characters (Unicode code points) of a text, sorted by code point, and a character's id is its
// place in that list.
//
//   auto tok = dp::data::CharTokenizer::from_file("input.txt");
//   tok.save("vocab.json");                                    // to sample from a checkpoint later
//   tok.write_token_file("input.txt", "train.bin");            // uint16 ids for TokenFileDataset
//   dp::Tensor ids = tok.encode("First Citizen:");              // int64 [14]
//   std::string text = tok.decode(ids);
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include "dp/core/tensor.h"
#include "dp/data/token_file_dataset.h"

namespace dp::data {

// Text is UTF-8. A text a vocabulary is built from must be non-empty, valid UTF-8 (no overlong
// forms, surrogates or code points past U+10FFFF) and free of NUL bytes (a NUL means binary data):
// otherwise a ValueError (IOError for a file, naming it) that gives the byte offset of the problem.
// Characters quoted in messages are escaped (control characters as C escapes, bidi and other
// invisible characters by code point) and followed by their code point, so a message never carries
// raw control bytes from a file. All methods are const and safe to call from several threads.
class CharTokenizer {
 public:
  // The vocabulary of `text` / of the whole file at `path` (not a regular file: IOError).
  static CharTokenizer from_text(std::string_view text);
  static CharTokenizer from_file(const std::string& path);
  // A vocabulary written by save(). Every problem is an IOError naming the file: missing, larger
  // than 64 MiB, not JSON, not this format, an entry that is not exactly one character, entries not
  // strictly increasing (unsorted or repeated), or a vocab_size that disagrees with the list.
  static CharTokenizer load(const std::string& path);
  // Explicit characters: sorted, distinct, valid code points, no NUL (ValueError otherwise).
  explicit CharTokenizer(std::vector<char32_t> chars);

  // Writes the vocabulary as JSON,
  // `{"format": "dparallel.CharTokenizer", "version": 1, "vocab_size": N, "chars": ["\n", " ", "!", ...]}`,
  // atomically as dp::save writes (temporary file, fsync, rename): a failed save leaves the
  // previous file intact. IOError naming the path.
  void save(const std::string& path) const;

  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  const std::vector<char32_t>& chars() const { return chars_; }
  // The UTF-8 of one id (IndexError out of range).
  std::string token(int64_t id) const;

  // The ids of `text`'s characters, int64 [number of characters]. A character outside the
  // vocabulary is a ValueError naming it (escaped), its code point and byte offset; invalid UTF-8
  // a ValueError with the byte offset.
  Tensor encode(std::string_view text) const;
  // The text of `ids`: an integer tensor (uint8, int32, int64) of 0 or 1 dimensions, on any device.
  // DTypeError / ShapeError otherwise; an id outside [0, vocab_size) is an IndexError naming the id
  // and its position.
  std::string decode(const Tensor& ids) const;
  std::string decode(const std::vector<int64_t>& ids) const;

  // The id width of token files for this vocabulary: uint16 when vocab_size <= 65536, else uint32.
  TokenDType token_dtype() const { return chars_.size() <= 65536 ? TokenDType::UInt16 : TokenDType::UInt32; }
  // Encodes the text file `text_path` and writes its ids to `token_path` as token_dtype() ids (the
  // file TokenFileDataset reads), atomically as save(). Returns the number of tokens written. The
  // text is checked as for from_file; a character outside the vocabulary is an IOError naming the
  // text file, the character and its byte offset.
  int64_t write_token_file(const std::string& text_path, const std::string& token_path) const;

 private:
  int64_t id_of(char32_t c) const;  // -1 when absent

  std::vector<char32_t> chars_;
  std::vector<int32_t> ascii_;  // id of each code point below 128, or -1
};

}  // namespace dp::data
