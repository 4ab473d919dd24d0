#pragma once
// Uneven inputs: Join (PyTorch's torch.distributed.algorithms.join.Join and DDP's model.join()).
//
// When ranks have different numbers of batches, a rank that runs out stops issuing the collectives
// of a training iteration and the others wait for it until their timeout. Inside a Join, a rank
// that has run out calls finish(): until every rank has finished, it "shadows" each iteration of
// the ranks still training (it takes part in their collectives with zeros), then all ranks agree on
// the final model.
//
//   auto join = ddp->join();                        // or Join join({ddp->joinable()}, options)
//   for (auto& batch : my_shard) {                  // each rank its own number of batches
//     optimizer.zero_grad();
//     ddp->forward_loss(criterion, batch.target, batch.data).backward();
//     optimizer.step();
//   }
//   join.finish();                                  // shadow the others until all are done
//
//  - Every iteration of a rank still training starts with one small allreduce that says which
//    ranks are still training (and whether this iteration synchronises gradients, uses
//    forward_loss, and broadcasts buffers); a finished rank answers it with zeros and then performs
//    the iteration's collectives with zeros: the buffer broadcast, forward_loss's loss, the
//    gradient buckets (and the comm hook's calls). It receives the reduced gradients as its .grad
//    (PyTorch's joined ranks do not), so a Joinable of the program's own, after DDP's, can take the
//    same optimizer step and keep the optimizer state equal (dp-train does).
//  - Gradients (plain forward, mean over ranks): divided by the initial world size
//    (divide_by_initial_world_size = true, PyTorch's default: finished ranks count as zero
//    gradients) or by the number of ranks still training (false). forward_loss is exact either way:
//    its mean is over the rows the training ranks actually had.
//  - Buffers are broadcast from the highest-numbered rank still training (rank 0 may have finished).
//  - At the end the ranks take the parameters and buffers of the rank that finished last (the highest
//    such rank), so all ranks end equal, as PyTorch's _sync_final_model.
//  - throw_on_early_termination: as soon as one rank has finished, every rank throws a
//    DistributedError at its next iteration (the finished one in finish()), naming the ranks that
//    ran out: for code whose other collectives cannot be shadowed.
//  - Inside a Join every forward with grad mode on must be followed by its backward (the finished
//    ranks shadow a backward for it), and evaluation forwards do not broadcast buffers.
//  - The destructor finishes if finish() was not called and no exception is in flight; an error
//    there is printed (a destructor cannot throw): call finish() to get it as an exception.
#include <cstddef>
#include <cstdint>
#include <vector>
#include "dp/distributed/process_group.h"

namespace dp::distributed {

struct JoinOptions {
  bool enable = true;
  bool throw_on_early_termination = false;
  // DDP: average gradients over the initial world size (true) or over the ranks still training.
  bool divide_by_initial_world_size = true;
};

// What one round's allreduce told: which ranks are still training, and the payload slots summed
// over them (what the first Joinable put in: DDP's flags).
struct JoinRound {
  int world = 0;
  std::vector<uint8_t> active;  // per rank: 1 while it trains
  std::vector<double> payload;  // summed over the ranks still training
  int active_count() const;
  // The highest rank still training (-1 when none).
  int last_active_rank() const;
};

class Join;

// An object whose per-iteration collectives a finished rank can shadow.
class Joinable {
 public:
  virtual ~Joinable() = default;
  virtual ProcessGroup& join_process_group() = 0;
  // How many payload slots this object's notify sends (the same on every rank, fixed).
  virtual size_t join_payload_size() const { return 0; }
  // A finished rank: one iteration of the ranks still training, with zeros.
  virtual void join_shadow(const JoinRound& round) = 0;
  // After every rank finished: agree on the final state. `is_last_joiner`: this rank finished
  // when every other one already had.
  virtual void join_finish(bool is_last_joiner) = 0;
  // The Join this object is part of (null outside one).
  Join* join_context() const { return join_; }

 private:
  friend class Join;
  Join* join_ = nullptr;
};

class Join {
 public:
  // Every rank must construct its Join with the same objects in the same order, the first one
  // notifying the rounds. Throws ValueError for an empty list, a null entry, an object already in a
  // Join, or objects on different process groups.
  explicit Join(std::vector<Joinable*> joinables, JoinOptions options = {});
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank has no more inputs: shadows the others until every rank has finished, then runs the
  // objects' join_finish. Throws DistributedError with throw_on_early_termination when another
  // rank is still training. Idempotent.
  void finish();
  bool finished() const { return finished_; }
  const JoinOptions& options() const { return options_; }

  // For Joinables: the start of an iteration on a rank still training. Only the first joinable's
  // call communicates (the others get the same round). `payload` must have the same length on
  // every rank (join_payload_size()). Throws when this rank has finished, and with throw_on_early_termination when
  // another one has.
  JoinRound notify(Joinable& caller, const std::vector<double>& payload);

 private:
  JoinRound round(bool active, const std::vector<double>& payload);
  std::vector<Joinable*> joinables_;
  JoinOptions options_;
  ProcessGroup* group_ = nullptr;
  size_t payload_size_ = 0;  // the first joinable's join_payload_size()
  bool finished_ = false;
  int uncaught_ = 0;  // exceptions in flight when constructed (the destructor finishes only if no more)
};

}  // namespace dp::distributed
