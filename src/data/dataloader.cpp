#include "dp/data/dataloader.h"

#include "data/epoch_run.h"
#include "dp/core/generator.h"

namespace dp::data {

namespace {

// A shuffle seed from the CPU default generator, so dp::manual_seed makes unseeded loaders
// reproducible (PyTorch's RandomSampler draws its seed from the default generator too).
uint64_t draw_seed() {
  Generator& g = default_generator(Device::cpu());
  uint32_t w[4];
  const uint64_t offset = g.reserve(1);
  philox4x32(g.seed(), offset, w);
  return (static_cast<uint64_t>(w[0]) << 32) | w[1];
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options, std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)), options_(std::move(options)), sampler_(std::move(sampler)) {
  DP_CHECK(dataset_ != nullptr, ValueError, "DataLoader: dataset is null");
  DP_CHECK(options_.batch_size() >= 1, ValueError, "DataLoader: batch_size must be at least 1, got ", options_.batch_size());
  DP_CHECK(options_.num_workers() >= 0, ValueError, "DataLoader: num_workers must be non-negative, got ", options_.num_workers());
  DP_CHECK(options_.prefetch() >= 1, ValueError, "DataLoader: prefetch must be at least 1, got ", options_.prefetch());
  DP_CHECK(!(sampler_ && options_.shuffle()), ValueError,
           "DataLoader: sampler option is mutually exclusive with shuffle (shuffle the sampler's indices instead)");
  if (!sampler_) {
    if (options_.shuffle()) {
      if (!options_.seed()) options_.seed(draw_seed());
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), *options_.seed());
    } else {
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
    }
  }
}

DataLoader::~DataLoader() = default;

size_t DataLoader::size() const {
  const size_t n = sampler_->size(), b = static_cast<size_t>(options_.batch_size());
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  const uint64_t epoch = next_epoch_;
  std::vector<int64_t> indices = sampler_->indices(epoch);
  DP_CHECK(indices.size() == sampler_->size(), ValueError, "DataLoader: the sampler returned ", indices.size(), " indices for epoch ", epoch,
           " but its size() is ", sampler_->size());
  const auto n = static_cast<int64_t>(dataset_->size());
  for (size_t k = 0; k < indices.size(); ++k)
    DP_CHECK(indices[k] >= 0 && indices[k] < n, IndexError, "DataLoader: the sampler's index ", indices[k], " (position ", k, " of epoch ", epoch,
             ") is out of range for a dataset of size ", n);
  const size_t num_batches = size();
  indices.resize(std::min(indices.size(), num_batches * static_cast<size_t>(options_.batch_size())));  // drop_last
  auto run = std::make_unique<detail::EpochRun>(dataset_, std::move(indices), static_cast<size_t>(options_.batch_size()), num_batches,
                                                static_cast<size_t>(options_.num_workers()), static_cast<size_t>(options_.prefetch()), epoch,
                                                options_.collate_fn());
  next_epoch_ = epoch + 1;
  return Iterator(std::move(run), num_batches, epoch);
}

// ---- Iterator ----

DataLoader::Iterator::Iterator(std::unique_ptr<detail::EpochRun> run, size_t num_batches, uint64_t epoch)
    : run_(std::move(run)), num_batches_(num_batches), epoch_(epoch) {
  if (num_batches_ == 0) run_.reset();
}

DataLoader::Iterator::Iterator(Iterator&& o) noexcept
    : run_(std::move(o.run_)),
      index_(o.index_),
      num_batches_(o.num_batches_),
      epoch_(o.epoch_),
      current_(std::move(o.current_)),
      error_(std::move(o.error_)) {
  o.index_ = o.num_batches_ = 0;  // the moved-from iterator equals end()
  o.current_.reset();
  o.error_ = nullptr;
}

DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&& o) noexcept {
  if (this != &o) {
    run_ = std::move(o.run_);  // joins this iterator's own epoch first
    index_ = o.index_;
    num_batches_ = o.num_batches_;
    epoch_ = o.epoch_;
    current_ = std::move(o.current_);
    error_ = std::move(o.error_);
    o.index_ = o.num_batches_ = 0;
    o.current_.reset();
    o.error_ = nullptr;
  }
  return *this;
}

DataLoader::Iterator::~Iterator() = default;  // ~EpochRun stops and joins the workers

Batch& DataLoader::Iterator::operator*() {
  if (error_) std::rethrow_exception(error_);
  if (!current_) {
    DP_CHECK(index_ < num_batches_ && run_ != nullptr, IndexError, "DataLoader: dereferenced an iterator past the last batch (", num_batches_,
             " batches)");
    try {
      current_.emplace(run_->take(index_));
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }
  return *current_;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (index_ >= num_batches_) return *this;
  if (!current_ && !error_) run_->skip(index_);
  current_.reset();
  error_ = nullptr;
  if (++index_ == num_batches_) run_.reset();  // epoch done: its threads have exited; join them now
  return *this;
}

}  // namespace dp::data
