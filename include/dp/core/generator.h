#pragma once
#include <cstdint>
#include <mutex>
#include "dp/core/device.h"

namespace dp {

// Counter-based Philox4x32-10 generator: a (seed, offset) pair fully determines the stream, so a
// CUDA kernel can later draw the same numbers from the same state, and a checkpoint can save it.
class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;  // how many 128-bit blocks have been consumed
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves n 128-bit blocks (4 uint32 each) and returns the first block's offset; thread-safe.
  uint64_t reserve(uint64_t blocks);
  std::mutex& mutex() { return mu_; }

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// One 128-bit Philox output block for (seed, counter).
void philox4x32(uint64_t seed, uint64_t counter, uint32_t out[4]);

// Each device has its own default generator (as each CUDA device does in PyTorch). manual_seed(s)
// seeds the host "cpu" generator with s itself (it draws what Generator(s) draws); each indexed
// device gets a SplitMix64 mix of s with its type and index, so devices draw independent streams.
Generator& default_generator(Device d);
// Seeds the default generator of every device, as torch.manual_seed does.
void manual_seed(uint64_t seed);

}  // namespace dp
