#pragma once
// DistributedSampler: each rank of a data-parallel job visits its own shard of the dataset
// (torch.utils.data.distributed.DistributedSampler).
//
//   auto sampler = std::make_shared<dp::data::DistributedSampler>(dataset.size(), pg->size(), pg->rank(),
//                                                                 /*shuffle=*/true, /*seed=*/42);
//   dp::data::DataLoader loader(dataset, dp::data::DataLoaderOptions(32), sampler);
//
// Layout (PyTorch's, so a job ported from PyTorch shards the same way):
//  1. The epoch's base list: RandomSampler(n, seed).indices(epoch) with shuffle (every rank draws
//     the same permutation because all use the same seed), else 0, 1, ..., n-1.
//  2. Without drop_last it is padded to total = world * ceil(n / world) entries by repeating its
//     head (cycling through the list again when n < world needs more padding than n entries);
//     with drop_last its tail is cut to total = world * floor(n / world).
//  3. Rank r takes entries r, r + world, r + 2 world, ... of that list.
// Every rank therefore gets size() indices, so all ranks run the same number of steps (DDP's
// collectives must pair up). Without drop_last up to world - 1 entries of the padded list are
// repeats; they always sit at the tail of a rank's list (position >= num_real()), so metric code
// can skip them with is_padding(position).
//
// The epoch is the DataLoader's (indices(epoch), counted by its begin() calls): there is no
// set_epoch to forget, and every epoch can be recomputed on its own. Note: the permutation is
// dparallel's Philox randperm, not PyTorch's (seed + epoch through torch's CPU generator), so only
// the layout, not the shuffled order, matches PyTorch.
//
// Evaluation: DistributedSampler::evaluation(n, world, rank) neither pads nor drops nor shuffles.
// Rank r takes r, r + world, ... of 0..n-1, so the ranks' lists together hold every index exactly
// once and their sizes differ by at most 1 (ranks below n % world get one more). Use it for
// validation metrics that must count every sample once; it is not for training under DDP, whose
// ranks must run equally many steps.
#include <cstddef>
#include <cstdint>
#include <vector>
#include "dp/data/sampler.h"

namespace dp::data {

class DistributedSampler : public Sampler {
 public:
  // n: the dataset's size; world: the number of ranks (>= 1); rank: this rank, in [0, world).
  // Throws ValueError naming the offending values.
  DistributedSampler(size_t n, int world, int rank, bool shuffle = true, uint64_t seed = 0, bool drop_last = false);

  // The evaluation layout described above (no shuffle, no padding, nothing dropped).
  static DistributedSampler evaluation(size_t n, int world, int rank);

  // This rank's indices for `epoch`, in visiting order (size() of them).
  std::vector<int64_t> indices(uint64_t epoch) override;
  // Indices per epoch for this rank: ceil(n / world), floor(n / world) with drop_last, and in
  // evaluation mode this rank's share (n / world, plus one for ranks below n % world).
  size_t size() const override { return size_; }

  // How many of this rank's indices are real samples: the first num_real() entries of every
  // epoch's list; the rest (at most one, without drop_last) repeat an index another rank or this
  // one already visits. Equals size() with drop_last and in evaluation mode.
  size_t num_real() const { return num_real_; }
  // Whether entry `position` of this rank's list is a padding repeat (position >= num_real()).
  bool is_padding(size_t position) const { return position >= num_real_; }

  size_t dataset_size() const { return n_; }
  int world() const { return world_; }
  int rank() const { return rank_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }
  bool drop_last() const { return drop_last_; }
  bool is_evaluation() const { return evaluation_; }

 private:
  DistributedSampler(size_t n, int world, int rank, bool shuffle, uint64_t seed, bool drop_last, bool evaluation);

  size_t n_;
  int world_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  bool evaluation_;
  size_t size_;
  size_t num_real_;
};

}  // namespace dp::data
