#pragma once
// Walking a Philox stream on the host, in the layout of src/ops/random.cpp's header comment: used
// by the CPU backend's random fills (random.cpp here, randint and randperm included) and the
// sequence kernels' multinomial.
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>
#include "core/philox.h"
#include "dp/core/generator.h"
#include "backend/random_kernels.h"
#include "dp/core/worker.h"

namespace dp::backend::cpu {

// The word mappings both backends share (core/philox.h).
using philox::k2pow53inv;
using philox::u53;
using philox::word64;

using backend::blocks_for;

// Calls f(i, block_words, k) for every element index i in [0, n) (k = i's place in its block),
// `per_block` consecutive elements sharing one Philox block, starting at the reserved block
// `first`. Since the stream is counter based, large fills are split over threads by block range
// (each thread gets its own copy of f, so f may keep per-thread state); not from a device worker,
// where DataParallel replicas already use the cores. The result does not depend on the split.
inline constexpr int64_t kParallelMinBlocks = int64_t{1} << 15;

template <typename F>
void for_blocks(uint64_t seed, uint64_t first, int64_t n, int per_block, F f, bool parallel = true) {
  const int64_t nblocks = (n + per_block - 1) / per_block;
  auto run = [seed, first, n, per_block](int64_t b0, int64_t b1, F fn) {
    uint32_t w[4];
    for (int64_t b = b0; b < b1; ++b) {
      philox4x32(seed, first + static_cast<uint64_t>(b), w);
      const int64_t i0 = b * per_block;
      const int64_t lim = std::min<int64_t>(per_block, n - i0);
      for (int64_t k = 0; k < lim; ++k) fn(i0 + k, w, static_cast<int>(k));
    }
  };
  int64_t threads = 1;
  if (parallel && nblocks >= 2 * kParallelMinBlocks && Worker::current() == nullptr) {
    const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
    threads = std::min<int64_t>({hw, 8, nblocks / kParallelMinBlocks});
  }
  if (threads <= 1) {
    run(0, nblocks, f);
    return;
  }
  const int64_t chunk = (nblocks + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t b0 = t * chunk, b1 = std::min(nblocks, b0 + chunk);
    if (b0 < b1) pool.emplace_back([&run, b0, b1, f] { run(b0, b1, f); });
  }
  run(0, std::min(nblocks, chunk), f);
  for (std::thread& th : pool) th.join();
}

}  // namespace dp::backend::cpu
