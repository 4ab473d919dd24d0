#include "dp/data/sampler.h"

#include "dp/core/generator.h"
#include "dp/ops/factory.h"

namespace dp::data {

std::vector<int64_t> SequentialSampler::indices(uint64_t /*epoch*/) {
  std::vector<int64_t> out(n_);
  for (size_t i = 0; i < n_; ++i) out[i] = static_cast<int64_t>(i);
  return out;
}

std::vector<int64_t> RandomSampler::indices(uint64_t epoch) {
  // randperm(n) consumes ceil((n-1)/2) Philox blocks (one 64-bit draw per Fisher-Yates swap, two
  // per block), so starting epoch e at e times that offset gives the same permutations as one
  // generator drawing a randperm per epoch, while any epoch can be recomputed alone.
  const uint64_t n = n_;
  const uint64_t blocks_per_epoch = n / 2;  // = ceil((n - 1) / 2) for n >= 1
  Generator gen(seed_);
  gen.set_state(seed_, epoch * blocks_per_epoch);
  return randperm(static_cast<int64_t>(n_), kInt64, &gen).to_vector<int64_t>();
}

}  // namespace dp::data
