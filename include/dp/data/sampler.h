#pragma once
// Samplers: which dataset indices an epoch visits, and in what order (torch.utils.data.Sampler).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dp::data {

// The user sampler interface. A DataLoader calls indices(epoch) once at the start of every epoch
// (epoch = 0, 1, 2, ... counted by that loader's begin() calls), on the caller's thread, and
// batches the list in order. Each index must lie in [0, dataset size) and the list must have
// size() entries (the DataLoader checks both: IndexError / ValueError). Indices may repeat (a
// weighted sampler with replacement), and size() may differ from the dataset's size.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(uint64_t epoch) = 0;
  // How many indices every epoch yields (what DataLoader::size() counts batches from).
  virtual size_t size() const = 0;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(size_t n) : n_(n) {}
  std::vector<int64_t> indices(uint64_t epoch) override;
  size_t size() const override { return n_; }

 private:
  size_t n_;
};

// A fresh uniform permutation of 0..n-1 every epoch, reproducible from the seed: epoch e yields
// exactly the (e+1)-th dp::randperm(n) drawn from a dp::Generator(seed), like PyTorch's
// RandomSampler with a seeded generator, and any epoch can be recomputed on its own (its draws
// start at Philox offset e * ceil((n-1)/2)).
class RandomSampler : public Sampler {
 public:
  RandomSampler(size_t n, uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<int64_t> indices(uint64_t epoch) override;
  size_t size() const override { return n_; }
  uint64_t seed() const { return seed_; }

 private:
  size_t n_;
  uint64_t seed_;
};

}  // namespace dp::data
