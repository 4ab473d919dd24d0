#pragma once
// MapDataset: a dataset whose examples pass through a transform (libtorch's dataset.map(t),
// torchvision's transform= argument). Build it with dp::data::map:
//
//   dp::manual_seed(0);
//   auto train = dp::data::map(dp::data::TensorDataset(images, labels),
//                              dp::data::transforms::RandomHorizontalFlip());
//   dp::data::DataLoader loader(std::move(train), dp::data::DataLoaderOptions(32).num_workers(2));
//
// Randomness. Every sample gets its own dp::Generator, seeded from the dataset's seed and where
// the sample is made, and the transform draws from it:
//  - inside a DataLoader: (seed, epoch, the sample's position in the epoch's index list). The
//    transformed batches are therefore the same with any num_workers and any thread timing, and a
//    new epoch draws anew, as PyTorch's seeded workers do.
//  - outside a DataLoader (get() called directly): (seed, how many samples this dataset made
//    outside a loader so far), reproducible when called in a fixed order.
// The seed is given, or else drawn from the CPU default generator when the dataset is built, so
// dp::manual_seed before building makes everything reproducible.
//
// get_batch() transforms each example on its own (random transforms differ per sample) and
// collates the results (dp::data::collate), so every transformed example must have one shape.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>
#include "dp/data/dataset.h"
#include "dp/data/transforms.h"

namespace dp::data {

class MapDataset : public Dataset {
 public:
  // Null dataset or transform: ValueError.
  MapDataset(std::shared_ptr<Dataset> dataset, std::shared_ptr<const transforms::Transform> transform, std::optional<uint64_t> seed = std::nullopt);

  // The transformed sample `index` (IndexError out of range, as the wrapped dataset's get).
  Example get(size_t index) override;
  size_t size() const override { return dataset_->size(); }
  Example get_batch(const std::vector<int64_t>& indices) override;

  uint64_t seed() const { return seed_; }
  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }
  const std::shared_ptr<const transforms::Transform>& transform() const { return transform_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<const transforms::Transform> transform_;
  uint64_t seed_;
  std::shared_ptr<std::atomic<uint64_t>> outside_calls_;  // shared: the dataset is movable
};

// map(dataset, transform[, seed]): the dataset and transform by value or as std::shared_ptr.
template <typename D, typename T>
MapDataset map(D&& dataset, T&& transform, std::optional<uint64_t> seed = std::nullopt) {
  std::shared_ptr<Dataset> ds;
  if constexpr (std::is_convertible_v<std::decay_t<D>, std::shared_ptr<Dataset>>)
    ds = std::forward<D>(dataset);
  else
    ds = std::make_shared<std::decay_t<D>>(std::forward<D>(dataset));
  std::shared_ptr<const transforms::Transform> tr;
  if constexpr (std::is_convertible_v<std::decay_t<T>, std::shared_ptr<const transforms::Transform>>)
    tr = std::forward<T>(transform);
  else
    tr = std::make_shared<const std::decay_t<T>>(std::forward<T>(transform));
  return MapDataset(std::move(ds), std::move(tr), seed);
}

namespace detail {
// Marks the current thread as building one DataLoader batch, whose first sample is `position` in
// `epoch`'s index list, for the MapDatasets the batch's get_batch reaches. Set by the DataLoader.
class SampleScope {
 public:
  SampleScope(uint64_t epoch, uint64_t first_position);
  ~SampleScope();
  SampleScope(const SampleScope&) = delete;
  SampleScope& operator=(const SampleScope&) = delete;

 private:
  struct State {
    bool active = false;
    uint64_t epoch = 0;
    uint64_t next_position = 0;
  };
  State saved_;
  friend class ::dp::data::MapDataset;
  static State& current();
};
}  // namespace detail

}  // namespace dp::data
