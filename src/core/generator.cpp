// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// per-device default generators.
//
// Stream layout: a Generator with state (seed, offset) produces the 128-bit blocks
//   philox4x32(seed, offset), philox4x32(seed, offset + 1), ...
// where the 64-bit seed is the Philox key (low word k0, high word k1) and the block number is the
// low 64 bits of the 128-bit counter (the high 64 bits are 0). Nothing else enters the output, so
// (seed, offset) fully determines the numbers on every machine.
//
// Devices: every device has its own default generator. manual_seed(s) gives the host "cpu" the
// seed s itself and every other device d the derived seed device_seed(s, d) (a SplitMix64 mix of s
// with the device type and index), so each device draws an independent stream for the same user
// seed, as each CUDA device does in PyTorch, while the host generator equals Generator(s).
#include "dp/core/generator.h"
#include <map>
#include <memory>
#include "core/philox.h"
#include "dp/core/errors.h"

namespace dp {

namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ull;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed device d's default generator gets for user seed s (identity for the host).
uint64_t device_seed(uint64_t s, Device d) {
  if (d == Device::cpu()) return s;
  uint64_t tag = (static_cast<uint64_t>(static_cast<uint8_t>(d.type)) << 32) | static_cast<uint64_t>(static_cast<uint16_t>(d.index) + 1u);
  return splitmix64(s ^ splitmix64(tag));
}

struct DefaultGenerators {
  std::mutex mu;
  uint64_t user_seed = kDefaultSeed;
  std::map<std::pair<int, int>, std::unique_ptr<Generator>> gens;  // (type, index) -> generator; never freed
};

DefaultGenerators& defaults() {
  static DefaultGenerators* d = new DefaultGenerators();  // outlives static destruction (worker threads)
  return *d;
}

}  // namespace

void philox4x32(uint64_t seed, uint64_t counter, uint32_t out[4]) { philox::rounds(seed, counter, out); }

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offset_;
}

void Generator::set_state(uint64_t seed, uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = offset;
}

uint64_t Generator::reserve(uint64_t blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t first = offset_;
  offset_ += blocks;
  return first;
}

Generator& default_generator(Device d) {
  DP_CHECK(d.index >= -1, DeviceError, "default_generator: invalid device ", d.str());
  DefaultGenerators& g = defaults();
  std::lock_guard<std::mutex> lock(g.mu);
  auto key = std::make_pair(static_cast<int>(d.type), static_cast<int>(d.index));
  auto it = g.gens.find(key);
  if (it == g.gens.end()) it = g.gens.emplace(key, std::make_unique<Generator>(device_seed(g.user_seed, d))).first;
  return *it->second;
}

void manual_seed(uint64_t seed) {
  DefaultGenerators& g = defaults();
  std::lock_guard<std::mutex> lock(g.mu);
  g.user_seed = seed;
  for (auto& [key, gen] : g.gens) gen->manual_seed(device_seed(seed, Device(static_cast<DeviceType>(key.first), key.second)));
}

}  // namespace dp
