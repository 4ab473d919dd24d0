#pragma once
// GlooProcessGroup: ProcessGroup on a gloo context (make_gloo_process_group builds it).
//
// Operations are checked on the issuing thread (typed errors naming the values), numbered, and
// queued; one communication thread per group runs them strictly in issue order, so every rank
// pairs its n-th collective with everyone else's n-th (the gloo tag is the sequence number). The
// hot path - one contiguous tensor - reduces in the tensor's own memory; anything else is packed
// per dtype into scratch buffers the group keeps. The first failure (a lost peer, a timeout, a
// mismatch) breaks the group: gloo's context is in an unknown state after an I/O error, so every
// later operation fails with an error of the same type that says so.
//
// A thread that waits for an operation (Work::wait without a timeout) while the operation is next in
// line and nothing is running runs it itself, instead of waking the communication thread and being
// woken by it (two hand-offs, a measurable share of a small collective). Either way operations run
// one at a time, in issue order.
//
// Work continuations (Work::then) run on the thread that ran the operation: they may issue
// operations (queued behind the current one) but must not wait for one of this group (the thread
// would wait for itself), nor drop the last reference to the group.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "distributed/gloo_collectives.h"
#include "distributed/gloo_rendezvous.h"
#include "distributed/gloo_staging.h"
#include "distributed/progress_publisher.h"
#include "dp/distributed/process_group.h"

namespace dp::distributed::detail {

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(GlooConnection connection, std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options, bool debug);
  // Fails the operations still queued, waits for the one in flight (bounded by its timeout; a
  // lost peer ends it at once), stops the threads and closes the connections.
  ~GlooProcessGroup() override;

  std::string backend_name() const override { return "gloo"; }
  const ProcessGroupOptions& options() const override { return options_; }
  WorkPtr allreduce(std::vector<Tensor> tensors, ReduceOp op) override;
  WorkPtr allreduce_compressed(std::vector<Tensor> tensors, ReduceOp op) override;
  WorkPtr broadcast(std::vector<Tensor> tensors, int root) override;
  WorkPtr allgather(std::vector<Tensor> outputs, const Tensor& input) override;
  WorkPtr reduce_scatter(const Tensor& output, std::vector<Tensor> inputs, ReduceOp op) override;
  WorkPtr barrier() override;
  void monitored_barrier(std::optional<std::chrono::milliseconds> timeout, bool wait_all_ranks) override;
  uint64_t sequence() const override;
  void note_progress(int64_t step, const char* phase) override { progress_.note(step, phase); }
  const std::shared_ptr<Store>& store() const override { return store_; }

  // The generation this group's keys live under in the store ("<name>/<generation>/...").
  int64_t generation() const { return connection_.generation; }

  using ProcessGroup::allreduce;
  using ProcessGroup::broadcast;

 private:
  // One queued operation: what it is (for messages, progress and the debug check) and what it
  // runs on the communication thread.
  struct Op {
    WorkPtr work;
    const char* name = "";
    uint64_t sequence = 0;
    std::string description;  // only with DP_DISTRIBUTED_DEBUG
    std::function<void(const GlooCall&)> run;
  };

  WorkPtr enqueue(const char* name, std::vector<Tensor> outputs, std::string description, std::function<void(const GlooCall&)> run);
  void loop();
  std::exception_ptr spread_failure(std::exception_ptr error);
  // Runs `work`'s operation on this thread if it is next and nothing is running (see above).
  void run_inline(const Work* work);
  void execute(Op& op);
  std::string who() const;

  // Communication-thread parts of the collectives (they use the scratch buffers).
  WorkPtr allreduce_impl(std::vector<Tensor> tensors, ReduceOp op, bool compressed);
  void reduce_dtype_group(const GlooCall& call, const std::vector<Tensor>& host, const std::vector<size_t>& items, ReduceOp op, bool compressed);
  void broadcast_tensors(const GlooCall& call, const std::vector<Tensor>& host, int root);
  void allgather_tensors(const GlooCall& call, const std::vector<Tensor>& outputs, const Tensor& input);
  void reduce_scatter_tensors(const GlooCall& call, const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op);

  ProcessGroupOptions options_;
  std::shared_ptr<Store> store_;
  GlooConnection connection_;
  const bool debug_;
  ProgressPublisher progress_;
  std::atomic<uint64_t> monitored_barriers_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  uint64_t next_sequence_ = 0;
  bool stop_ = false;
  bool running_ = false;  // an operation is executing (on the communication thread or inline)

  // What the works' inline runners reach the group through: the destructor clears `group` (after
  // any inline operation in progress has finished), so a runner called later does nothing.
  struct InlineAccess {
    std::mutex mu;
    GlooProcessGroup* group;
  };
  std::shared_ptr<InlineAccess> inline_access_;
  std::exception_ptr broken_;  // the first error; later operations fail with unusable_error(broken_)

  ScratchBuffer scratch_;       // communication thread only
  ScratchBuffer recv_scratch_;  // reduce_scatter's receive buffer
  std::thread thread_;
};

}  // namespace dp::distributed::detail
