#pragma once
// One DataLoader epoch: the epoch's index list, the threads that build its batches and the
// in-order delivery of what they built. Private to src/data.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include "dp/data/dataloader.h"
#include "dp/data/dataset.h"

namespace dp::data::detail {

class EpochRun {
 public:
  // workers == 0: batches are built by take() on the caller's thread. Otherwise `workers` threads
  // start now and build batches in order, at most `workers * prefetch` ahead of delivery.
  // A non-empty `collate` builds each batch from the dataset's get() of every index (see
  // DataLoaderOptions::collate_fn); otherwise batches come from Dataset::get_batch.
  EpochRun(std::shared_ptr<Dataset> dataset, std::vector<int64_t> indices, size_t batch_size, size_t num_batches, size_t workers, size_t prefetch,
           uint64_t epoch, CollateFn collate = {});
  // Stops handing out batches, lets the ones being built finish, joins the threads.
  ~EpochRun();
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  // Batch i, or its (annotated) exception. Batches are taken or skipped once each, in order.
  Batch take(size_t i);
  // Drops batch i without building it (inline) or discards it and its error (workers).
  void skip(size_t i);

 private:
  struct Slot {
    bool ready = false;
    Batch batch;
    std::exception_ptr error;
  };

  // Runs the dataset for batch i; any exception comes back annotated with the batch and epoch.
  Batch build(size_t i);
  void worker_loop();

  std::shared_ptr<Dataset> dataset_;
  std::vector<int64_t> indices_;
  size_t batch_size_;
  size_t num_batches_;
  uint64_t epoch_;
  CollateFn collate_;
  size_t capacity_;  // batches claimed by workers but not yet delivered, at most

  std::mutex mu_;
  std::condition_variable work_cv_;   // a worker may claim a batch, or must stop
  std::condition_variable ready_cv_;  // a slot became ready
  size_t next_claim_ = 0;             // next batch a worker builds
  size_t next_deliver_ = 0;           // next batch take()/skip() returns
  bool stop_ = false;
  std::vector<Slot> slots_;  // batch i lives in slots_[i % capacity_] while in flight
  std::vector<std::thread> threads_;
};

// The exception to rethrow for `error`, raised while building `batch` of `epoch`: the same type
// with "DataLoader: batch <batch> of epoch <epoch>: " before the message where the type is one we
// can rebuild exactly (dp errors, std exceptions with a message constructor), else a dp::Error
// with that message and the original nested.
std::exception_ptr annotate_batch_error(std::exception_ptr error, size_t batch, uint64_t epoch);

}  // namespace dp::data::detail
