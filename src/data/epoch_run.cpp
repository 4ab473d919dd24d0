// DataLoader epochs: worker threads, bounded prefetch, in-order delivery, error annotation.
//
// Workers claim batch numbers in increasing order from a shared counter (so a slow batch does not
// hold up the others' workers, unlike a fixed round-robin) but only while the claimed batch is
// less than `capacity_` ahead of the next one to deliver: that bounds memory to `capacity_`
// batches and makes slots_[i % capacity_] a collision-free home for batch i. The consumer waits
// for exactly the batch it needs, so delivery order never depends on thread timing.
#include "data/epoch_run.h"

#include <new>
#include <stdexcept>
#include <string>
#include "dp/data/map_dataset.h"

namespace dp::data::detail {

EpochRun::EpochRun(std::shared_ptr<Dataset> dataset, std::vector<int64_t> indices, size_t batch_size, size_t num_batches, size_t workers,
                   size_t prefetch, uint64_t epoch, CollateFn collate)
    : dataset_(std::move(dataset)),
      indices_(std::move(indices)),
      batch_size_(batch_size),
      num_batches_(num_batches),
      epoch_(epoch),
      collate_(std::move(collate)),
      capacity_(workers * prefetch) {
  if (workers == 0 || num_batches_ == 0) return;
  slots_.resize(capacity_);
  const size_t n_threads = std::min(workers, num_batches_);  // more would find nothing to claim
  threads_.reserve(n_threads);
  try {
    for (size_t w = 0; w < n_threads; ++w) threads_.emplace_back([this] { worker_loop(); });
  } catch (...) {  // thread creation failed: stop the ones started, then report
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

EpochRun::~EpochRun() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Batch EpochRun::build(size_t i) {
  const size_t begin = i * batch_size_;
  const size_t end = std::min(indices_.size(), begin + batch_size_);
  try {
    const std::vector<int64_t> idx(indices_.begin() + static_cast<std::ptrdiff_t>(begin), indices_.begin() + static_cast<std::ptrdiff_t>(end));
    // Where these samples sit in the epoch, for the per-sample generators of MapDatasets.
    detail::SampleScope scope(epoch_, begin);
    const auto count = static_cast<int64_t>(idx.size());
    if (collate_) {
      std::vector<Example> examples;
      examples.reserve(idx.size());
      for (int64_t k : idx) examples.push_back(dataset_->get(static_cast<size_t>(k)));
      Batch b = collate_(std::move(examples));
      // The layout is the collate function's (a padded batch may be time-major); only what every
      // batch needs is checked: data, and lengths (when set) with one entry per sample.
      DP_CHECK(b.data.defined(), ValueError, "the collate_fn returned a batch with undefined data");
      DP_CHECK(!b.lengths.defined() || (b.lengths.dim() == 1 && b.lengths.size(0) == count), ShapeError, "the collate_fn returned lengths of shape ",
               b.lengths.defined() ? b.lengths.size_str() : std::string(), " for ", count, " samples (expected [", count, "])");
      return b;
    }
    Batch b = dataset_->get_batch(idx);
    // A user dataset's get_batch may be wrong; say so here rather than deep inside the model.
    DP_CHECK(b.data.defined() && b.data.dim() >= 1 && b.data.size(0) == count, ShapeError, "Dataset::get_batch returned data of shape ",
             b.data.defined() ? b.data.size_str() : std::string("(undefined)"), " for ", count, " indices (expected a leading dimension of ", count,
             ")");
    DP_CHECK(!b.target.defined() || (b.target.dim() >= 1 && b.target.size(0) == count), ShapeError, "Dataset::get_batch returned a target of shape ",
             b.target.size_str(), " for ", count, " indices (expected a leading dimension of ", count, ")");
    return b;
  } catch (...) {
    std::rethrow_exception(annotate_batch_error(std::current_exception(), i, epoch_));
  }
}

void EpochRun::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [this] { return stop_ || next_claim_ >= num_batches_ || next_claim_ < next_deliver_ + capacity_; });
    if (stop_ || next_claim_ >= num_batches_) return;
    const size_t i = next_claim_++;
    lk.unlock();
    Slot result;
    try {
      result.batch = build(i);
    } catch (...) {
      result.error = std::current_exception();
    }
    result.ready = true;
    lk.lock();
    slots_[i % capacity_] = std::move(result);
    // Only the consumer waits on ready_cv_, but it may be waiting for another batch than i.
    ready_cv_.notify_all();
  }
}

Batch EpochRun::take(size_t i) {
  if (threads_.empty()) {
    next_deliver_ = i + 1;
    return build(i);
  }
  Slot s;
  {
    std::unique_lock<std::mutex> lk(mu_);
    Slot& slot = slots_[i % capacity_];
    ready_cv_.wait(lk, [&] { return slot.ready; });
    s = std::move(slot);
    slot = Slot();
    next_deliver_ = i + 1;
  }
  work_cv_.notify_one();  // one more batch may be claimed
  if (s.error) std::rethrow_exception(s.error);
  return std::move(s.batch);
}

void EpochRun::skip(size_t i) {
  if (threads_.empty()) {
    next_deliver_ = i + 1;
    return;
  }
  try {
    take(i);
  } catch (...) {  // a skipped batch's failure is nobody's business
  }
}

namespace {

template <typename E>
bool rebuild_as(const std::exception& e, const std::string& prefix, std::exception_ptr& out) {
  if (typeid(e) != typeid(E)) return false;
  out = std::make_exception_ptr(E(prefix + e.what()));
  return true;
}

}  // namespace

std::exception_ptr annotate_batch_error(std::exception_ptr error, size_t batch, uint64_t epoch) {
  const std::string prefix = "DataLoader: batch " + std::to_string(batch) + " of epoch " + std::to_string(epoch) + ": ";
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    return error;  // no message to amend; the type matters more
  } catch (const std::exception& e) {
    // Exact types only: rebuilding a subclass as its base would silently change what catches it.
    std::exception_ptr out;
    if (rebuild_as<Error>(e, prefix, out) || rebuild_as<ShapeError>(e, prefix, out) || rebuild_as<DTypeError>(e, prefix, out) ||
        rebuild_as<DeviceError>(e, prefix, out) || rebuild_as<IndexError>(e, prefix, out) || rebuild_as<ValueError>(e, prefix, out) ||
        rebuild_as<AutogradError>(e, prefix, out) || rebuild_as<NotImplementedError>(e, prefix, out) || rebuild_as<OutOfMemory>(e, prefix, out) ||
        rebuild_as<IOError>(e, prefix, out) || rebuild_as<std::runtime_error>(e, prefix, out) || rebuild_as<std::range_error>(e, prefix, out) ||
        rebuild_as<std::overflow_error>(e, prefix, out) || rebuild_as<std::underflow_error>(e, prefix, out) ||
        rebuild_as<std::logic_error>(e, prefix, out) || rebuild_as<std::invalid_argument>(e, prefix, out) ||
        rebuild_as<std::domain_error>(e, prefix, out) || rebuild_as<std::length_error>(e, prefix, out) ||
        rebuild_as<std::out_of_range>(e, prefix, out))
      return out;
    try {
      std::throw_with_nested(Error(prefix + e.what()));  // nests the exception being handled
    } catch (...) {
      return std::current_exception();
    }
  } catch (...) {
    try {
      std::throw_with_nested(Error(prefix + "an exception not derived from std::exception"));
    } catch (...) {
      return std::current_exception();
    }
  }
}

}  // namespace dp::data::detail
