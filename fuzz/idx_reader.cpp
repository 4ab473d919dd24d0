// Fuzz target: the Fashion-MNIST IDX reader (plain or gzip). The first byte chooses the file kind
// (bit 0: labels or images) and, for images, the label count they must match (the other bits); the
// rest is the file. Every input must load or end in a dp::Error; anything else is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include "dp/data/fashion_mnist.h"
#include "fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool labels = (data[0] & 1) == 0;
  const int64_t expected = data[0] >> 1;
  const std::string& path = dp_fuzz::input_file(data + 1, size - 1);
  try {
    if (labels) (void)dp::data::detail::read_idx_labels(path);
    else (void)dp::data::detail::read_idx_images(path, expected, "labels");
  } catch (const dp::Error&) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idx_reader: foreign exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
