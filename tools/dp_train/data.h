#pragma once
// The training and test sets, and the per-epoch loaders that let a run stop and resume anywhere.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "args.h"
#include "dp/data/data.h"

namespace dp::train {

struct DataSets {
  std::shared_ptr<data::TensorDataset> train;
  std::shared_ptr<data::TensorDataset> test;
  std::string description;  // for the header line: "Fashion-MNIST: 60000 train, 10000 test images"
  bool binary = false;      // seed: one probability per row, label 0/1 (float); else class ids (int64)
};

// Random data draws from the host's default generator, so the caller seeds it first (the same
// seed gives the same data, also when a run is resumed). Fashion-MNIST is normalised once here
// with the training set's pixel mean and standard deviation. A missing or corrupt data set is an
// IOError that names the files and the package to install.
DataSets load_data(const RunSettings& settings);

// The indices one epoch visits from batch `first_batch` on: the epoch's permutation (the e-th of
// dp::data::RandomSampler(n, seed), which recomputes any epoch on its own) or 0..n-1, without
// its first first_batch * batch_size entries. So the batches of a resumed epoch are exactly those
// the interrupted epoch would have gone on to.
class EpochSampler : public data::Sampler {
 public:
  EpochSampler(size_t n, bool shuffle, uint64_t seed, uint64_t epoch, size_t skip);
  std::vector<int64_t> indices(uint64_t /*loader epoch: ignored, this sampler serves one epoch*/) override;
  size_t size() const override { return n_ - skip_; }

 private:
  size_t n_;
  bool shuffle_;
  uint64_t seed_, epoch_;
  size_t skip_;
};

// A loader for the rest of epoch `epoch` (0-based), starting at batch `first_batch`.
data::DataLoader epoch_loader(const DataSets& sets, const RunSettings& settings, uint64_t epoch, int64_t first_batch, int64_t workers);

// Batches in one epoch (the last may be shorter: nothing is dropped).
int64_t steps_per_epoch(const DataSets& sets, const RunSettings& settings);

}  // namespace dp::train
