// Fuzz target: the text-data readers. The first byte chooses (bits 0-1) what reads the rest, as a
// file: 0 CharTokenizer::from_file (then encode and decode of the same text must round-trip),
// 1 CharTokenizer::load (a vocabulary; every character must encode to its id), 2 and 3
// TokenFileDataset with uint16 / uint32 ids, block_size ((byte >> 2) & 7) + 1 and vocab_size
// (byte >> 5) * 40 (0: unchecked), every window read back (ids below vocab_size when checked).
// Every input must load or end in a dp::Error; anything else is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>
#include "dp/data/char_tokenizer.h"
#include "dp/data/token_file_dataset.h"
#include "dp/ops/reduction.h"
#include "fuzz_input_file.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "text_data: %s\n", what);
  std::abort();
}

void run(uint8_t mode, const uint8_t* data, size_t size) {
  const std::string& path = dp_fuzz::input_file(data, size);
  switch (mode & 3) {
    case 0: {
      const dp::data::CharTokenizer tok = dp::data::CharTokenizer::from_file(path);
      const std::string text(reinterpret_cast<const char*>(data), size);
      if (tok.decode(tok.encode(text)) != text) finding("from_file's text does not round-trip through encode and decode");
      break;
    }
    case 1: {
      const dp::data::CharTokenizer tok = dp::data::CharTokenizer::load(path);
      for (int64_t id = 0; id < tok.vocab_size(); ++id)
        if (tok.encode(tok.token(id)).item<int64_t>() != id) finding("a loaded vocabulary entry does not encode to its id");
      break;
    }
    default: {
      const int64_t block = ((mode >> 2) & 7) + 1, vocab = (mode >> 5) * 40;
      const dp::data::TokenFileDataset ds(path, block,
                                          dp::data::TokenFileOptions()
                                              .dtype((mode & 3) == 3 ? dp::data::TokenDType::UInt32 : dp::data::TokenDType::UInt16)
                                              .stride(1)
                                              .vocab_size(vocab));
      dp::data::TokenFileDataset copy = ds;
      std::vector<int64_t> all(copy.size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
      const dp::data::Example b = copy.get_batch(all);
      if (vocab > 0 && b.target.numel() > 0 && b.target.max().item<int64_t>() >= vocab) finding("an id >= vocab_size passed the check");
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  try {
    run(data[0], data + 1, size - 1);
  } catch (const dp::Error&) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "text_data: foreign exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
