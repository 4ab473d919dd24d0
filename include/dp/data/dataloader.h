#pragma once
// DataLoader: batches of a Dataset, optionally shuffled, optionally built by background threads
// (torch.utils.data.DataLoader for map-style datasets).
//
//   dp::data::DataLoader loader(dp::data::RandomDataset(5, 100),
//                               dp::data::DataLoaderOptions().batch_size(30).shuffle(true).seed(42));
//   for (dp::data::Batch& b : loader) model->forward(b.data);   // batches of 30, 30, 30, 10
//
// Epochs: every begin() starts a new epoch (epoch 0, 1, ...), asking the sampler for that epoch's
// indices; a shuffling loader therefore visits a new permutation each epoch, reproducible from the
// seed. Batch k holds indices [k*B, (k+1)*B) of the epoch's list; the last, shorter batch is
// delivered unless drop_last.
//
// Workers: with num_workers == 0 each batch is built on the caller's thread when the iterator is
// dereferenced. With num_workers = W > 0, W threads build batches ahead (at most prefetch * W
// batches in flight or waiting) and the iterator delivers them in batch order, so the batches
// equal those of num_workers == 0. The threads run only dataset code (Dataset::get_batch); they
// are plain threads, not device workers, and do not touch OpenBLAS's pool unless the dataset
// itself multiplies matrices.
//
// Collation: by default a batch is Dataset::get_batch(indices) (stacked samples). With
// collate_fn(fn), the loader instead gets every sample with Dataset::get and calls fn on the
// batch's examples, in index order; fn's result is the batch (torch's collate_fn). fn runs where
// the batch is built, so with workers it runs on several threads at once and must be safe to call
// concurrently. dp::data::PadCollate pads variable-length samples and records their lengths:
//
//   DataLoader loader(sentences, DataLoaderOptions(32).collate_fn(dp::data::PadCollate().padding_value(0)));
//
// Errors: an exception thrown while building batch k (by the dataset or the collate function) (in a worker or inline) is thrown from the
// dereference of batch k, never earlier, with "DataLoader: batch k of epoch e: " put in front of
// its message. Its type is kept for dp::Error and its subclasses and for the std exceptions
// constructible from a message (runtime_error, logic_error and their standard subclasses); any
// other exception becomes a dp::Error carrying the message, with the original nested
// (std::rethrow_if_nested reaches it). Batches after a failed one can still be read with ++it, and
// a new begin() starts a clean epoch.
//
// Lifetime: the iterator owns its epoch's threads. Destroying it (breaking out of a range-for,
// an exception leaving the loop) stops the epoch: no new batch is started, the batches being built
// are finished (a Dataset call cannot be interrupted) and the threads are joined. An epoch keeps
// the dataset and sampler alive by shared ownership, so destroying the DataLoader while an
// iterator is still alive is safe too. A DataLoader is used from one thread at a time (its
// begin() is not synchronised); two live iterators of one loader run independent epochs.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>
#include "dp/data/dataset.h"
#include "dp/data/sampler.h"

namespace dp::data {

// Turns one batch's examples (at least one, in the batch's index order) into the batch.
using CollateFn = std::function<Batch(std::vector<Example>)>;

// Chainable options: DataLoaderOptions().batch_size(30).shuffle(true).seed(42).num_workers(2).
struct DataLoaderOptions {
  explicit DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}

  DataLoaderOptions& batch_size(int64_t v) {
    batch_size_ = v;
    return *this;
  }  // >= 1
  DataLoaderOptions& shuffle(bool v) {
    shuffle_ = v;
    return *this;
  }  // RandomSampler
  // Seed of the shuffle. Unset: drawn from the CPU default generator when the loader is built
  // (so dp::manual_seed before building makes it reproducible, as torch.manual_seed does).
  DataLoaderOptions& seed(uint64_t v) {
    seed_ = v;
    return *this;
  }
  DataLoaderOptions& drop_last(bool v) {
    drop_last_ = v;
    return *this;
  }  // drop a short last batch
  DataLoaderOptions& num_workers(int64_t v) {
    num_workers_ = v;
    return *this;
  }  // >= 0 background threads
  DataLoaderOptions& prefetch(int64_t v) {
    prefetch_ = v;
    return *this;
  }  // >= 1 batches per worker
  // Builds each batch from its examples (see "Collation" above); an empty function restores the
  // default (Dataset::get_batch).
  DataLoaderOptions& collate_fn(CollateFn fn) {
    collate_fn_ = std::move(fn);
    return *this;
  }

  int64_t batch_size() const { return batch_size_; }
  bool shuffle() const { return shuffle_; }
  const std::optional<uint64_t>& seed() const { return seed_; }
  bool drop_last() const { return drop_last_; }
  int64_t num_workers() const { return num_workers_; }
  int64_t prefetch() const { return prefetch_; }
  const CollateFn& collate_fn() const { return collate_fn_; }

 private:
  int64_t batch_size_;
  bool shuffle_ = false;
  std::optional<uint64_t> seed_;
  bool drop_last_ = false;
  int64_t num_workers_ = 0;
  int64_t prefetch_ = 2;
  CollateFn collate_fn_;
};

namespace detail {
class EpochRun;  // one epoch's index list, worker threads and delivery queue (src/data/epoch_run.h)
}

class DataLoader {
 public:
  // `sampler` replaces the default one (SequentialSampler, or RandomSampler(seed) with shuffle);
  // giving both a sampler and shuffle(true) is a ValueError, as in PyTorch. Bad options are
  // ValueErrors naming the option.
  explicit DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = DataLoaderOptions(), std::shared_ptr<Sampler> sampler = nullptr);
  // Takes a dataset by value: DataLoader(TensorDataset(x, y), options).
  template <typename D>
  requires std::is_base_of_v<Dataset, std::decay_t<D>>
  explicit DataLoader(D&& dataset, DataLoaderOptions options = DataLoaderOptions(), std::shared_ptr<Sampler> sampler = nullptr)
      : DataLoader(std::make_shared<std::decay_t<D>>(std::forward<D>(dataset)), std::move(options), std::move(sampler)) {}

  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  DataLoader(DataLoader&&) noexcept = default;
  DataLoader& operator=(DataLoader&&) noexcept = default;
  ~DataLoader();

  struct Sentinel {};

  // A single-pass (input) iterator over one epoch; move-only because it owns the epoch's threads.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using reference = Batch&;
    using pointer = Batch*;

    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    Iterator(const Iterator&) = delete;
    Iterator& operator=(const Iterator&) = delete;
    ~Iterator();

    // The current batch (built or awaited on first access; throws that batch's error, again on
    // every access). The reference stays valid until ++ or destruction; moving out of it is fine.
    Batch& operator*();
    Batch* operator->() { return &**this; }
    // Moves to the next batch; a batch never dereferenced is skipped (not built when inline).
    Iterator& operator++();
    bool operator==(const Sentinel&) const { return index_ >= num_batches_; }

    size_t batch_index() const { return index_; }
    uint64_t epoch() const { return epoch_; }

   private:
    friend class DataLoader;
    Iterator(std::unique_ptr<detail::EpochRun> run, size_t num_batches, uint64_t epoch);

    std::unique_ptr<detail::EpochRun> run_;
    size_t index_ = 0;
    size_t num_batches_ = 0;
    uint64_t epoch_ = 0;
    std::optional<Batch> current_;
    std::exception_ptr error_;  // the current batch's failure, rethrown on each access
  };

  // Starts the next epoch (and its workers). Throws if the sampler's list is invalid.
  Iterator begin();
  Sentinel end() const { return {}; }

  // Batches per epoch: ceil(n / batch_size), or floor with drop_last (n = the sampler's size()).
  size_t size() const;
  // Epochs started so far (the epoch the next begin() starts).
  uint64_t epochs_started() const { return next_epoch_; }
  const DataLoaderOptions& options() const { return options_; }
  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  uint64_t next_epoch_ = 0;
};

}  // namespace dp::data
