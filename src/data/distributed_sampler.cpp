#include "dp/data/distributed_sampler.h"

#include "dp/core/errors.h"

namespace dp::data {

namespace {

// This rank's share of 0..n-1 taken every world-th from `rank` (the evaluation layout, and the
// real, unpadded part of the training layout).
size_t strided_count(size_t n, size_t world, size_t rank) { return n / world + (rank < n % world ? 1 : 0); }

}  // namespace

DistributedSampler::DistributedSampler(size_t n, int world, int rank, bool shuffle, uint64_t seed, bool drop_last)
    : DistributedSampler(n, world, rank, shuffle, seed, drop_last, /*evaluation=*/false) {}

DistributedSampler DistributedSampler::evaluation(size_t n, int world, int rank) {
  return DistributedSampler(n, world, rank, /*shuffle=*/false, /*seed=*/0, /*drop_last=*/false, /*evaluation=*/true);
}

DistributedSampler::DistributedSampler(size_t n, int world, int rank, bool shuffle, uint64_t seed, bool drop_last, bool evaluation)
    : n_(n), world_(world), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last), evaluation_(evaluation) {
  DP_CHECK(world >= 1, ValueError, "DistributedSampler: world must be at least 1, got ", world);
  DP_CHECK(rank >= 0 && rank < world, ValueError, "DistributedSampler: rank must lie in [0, world) = [0, ", world, "), got ", rank);
  DP_CHECK(n <= static_cast<size_t>(INT64_MAX), ValueError, "DistributedSampler: dataset size ", n, " does not fit an int64 index");
  const auto w = static_cast<size_t>(world), r = static_cast<size_t>(rank);
  if (evaluation_) {
    size_ = num_real_ = strided_count(n, w, r);
  } else if (drop_last_) {
    size_ = num_real_ = n / w;  // PyTorch's ceil((n - world) / world) when n % world != 0, which is this
  } else {
    size_ = n / w + (n % w != 0 ? 1 : 0);
    num_real_ = strided_count(n, w, r);
  }
}

std::vector<int64_t> DistributedSampler::indices(uint64_t epoch) {
  std::vector<int64_t> out(size_);
  if (size_ == 0) return out;
  // The base list every rank shares; position p of the padded (or cut) list is base[p % n]:
  // PyTorch's padding repeats the head, cycling again when it needs more than n entries, and the
  // cut keeps a prefix, so one modulo covers both.
  std::vector<int64_t> base;
  if (shuffle_) base = RandomSampler(n_, seed_).indices(epoch);
  const auto w = static_cast<size_t>(world_), r = static_cast<size_t>(rank_);
  for (size_t k = 0; k < size_; ++k) {
    const size_t p = (r + k * w) % n_;
    out[k] = shuffle_ ? base[p] : static_cast<int64_t>(p);
  }
  return out;
}

}  // namespace dp::data
