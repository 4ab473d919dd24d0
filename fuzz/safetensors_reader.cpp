// Fuzz target: the safetensors reader (dp::load_file) on arbitrary bytes. Every input must either
// load or end in a dp::Error; anything else (a crash, a sanitizer report, another exception type,
// std::bad_alloc included) is a finding. Only the reader is exercised: a loaded file is not written
// back (a dp::save and second load of each loaded input, even to tmpfs, made it 3 to 4 times slower;
// the writer's round trips are tested in tests/core/test_serialize*.cpp).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include "dp/core/serialize.h"
#include "fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dp_fuzz::input_file(data, size);
  try {
    dp::SafetensorsFile f = dp::load_file(path);
    for (const auto& item : f.tensors) (void)item.value().numel();
  } catch (const dp::Error&) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_reader: foreign exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
