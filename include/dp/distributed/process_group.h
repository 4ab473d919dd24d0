#pragma once
// ProcessGroup: the collectives of `size()` ranks (c10d's ProcessGroup). Each rank is a process
// (or, in tests, a thread) holding its own tensors; a collective combines them.
//
//  - Every operation returns at once with a Work (dp/distributed/work.h); the group runs its
//    operations one at a time, in the order they were issued, on its own communication thread. All
//    ranks must issue the same collectives in the same order (that is what pairs them up).
//  - The tensors an operation names must stay alive and untouched until its Work completes; the
//    Work keeps them alive. Results are written into them in place, without bumping autograd
//    version counters (collectives are not differentiable).
//  - Tensors: any dtype, any device of this process's host memory (cpu, cpu:i); CUDA tensors are
//    staged through host memory. Non-contiguous tensors are reduced through a contiguous copy.
//    Float16/BFloat16 are reduced with float32 accumulation (one rounding at the end).
//  - Every operation has a timeout (options().timeout: 60 s unless DP_DIST_TIMEOUT or the
//    group's options say otherwise). Errors (dp/distributed/errors.h) name ranks: a lost peer
//    (PeerLostError), an operation that did not finish in time (CollectiveTimeout, with the ranks
//    that are behind). After such an error the group is unusable, and every later operation fails
//    with an error of the same kind that says so.
//  - Ranks that all run on one host allreduce through a shared-memory segment instead of TCP
//    (bit-identical results on every rank; DP_SHM=0 turns it off); other collectives use TCP.
//  - Several groups may exist at once (each has its own thread and connections): nothing global.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "dp/core/tensor.h"
#include "dp/distributed/store.h"
#include "dp/distributed/work.h"

namespace dp::distributed {

enum class ReduceOp { Sum, Avg, Min, Max, Product };
const char* reduce_op_name(ReduceOp op);

struct ProcessGroupOptions {
  // Every collective, and the rendezvous that forms the group. Default: DP_DIST_TIMEOUT (seconds)
  // if set, else 60 s.
  std::chrono::milliseconds timeout = default_timeout();
  // The local address the transport binds (an IP address or host name). Empty: the address of
  // the interface that routes to the store's host (init_process_group fills it in), else
  // loopback when the group is made from a HashStore/FileStore in one machine.
  std::string bind_address;
  // A name for the group in messages and store keys ("default").
  std::string name = "default";

  static std::chrono::milliseconds default_timeout();
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;
  virtual const ProcessGroupOptions& options() const = 0;

  // Every tensor is reduced element-wise across ranks, in place. The tensors may differ in shape
  // and dtype (they are reduced together, coalesced per dtype); every rank must pass the same
  // list (same shapes and dtypes, in the same order). Avg divides by size() (floating dtypes only).
  virtual WorkPtr allreduce(std::vector<Tensor> tensors, ReduceOp op = ReduceOp::Sum) = 0;
  WorkPtr allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) { return allreduce(std::vector<Tensor>{tensor}, op); }
  // As allreduce, but Float16/BFloat16 travel as they are (half the bytes of float32): each
  // pairwise sum is computed in float32 and rounded once, so with 2 ranks the result equals the
  // float32 sum rounded once, and with more there is one rounding per step. The gradient
  // compression hooks use it. Other dtypes: exactly allreduce.
  virtual WorkPtr allreduce_compressed(std::vector<Tensor> tensors, ReduceOp op = ReduceOp::Sum) { return allreduce(std::move(tensors), op); }
  // Every rank's tensors get root's values, in place.
  virtual WorkPtr broadcast(std::vector<Tensor> tensors, int root = 0) = 0;
  WorkPtr broadcast(const Tensor& tensor, int root = 0) { return broadcast(std::vector<Tensor>{tensor}, root); }
  // outputs[r] (size() tensors shaped like input) receives rank r's input.
  virtual WorkPtr allgather(std::vector<Tensor> outputs, const Tensor& input) = 0;
  // inputs has size() tensors shaped like output; output = the reduction over ranks of their
  // inputs[rank()].
  virtual WorkPtr reduce_scatter(const Tensor& output, std::vector<Tensor> inputs, ReduceOp op = ReduceOp::Sum) = 0;
  // Completes when every rank has entered the barrier.
  virtual WorkPtr barrier() = 0;
  // A barrier through the store that names the ranks that did not arrive within `timeout`
  // (default: options().timeout) in a RendezvousError; with wait_all_ranks it waits the whole
  // timeout to list all of them, else it names the first one missing. Blocking.
  virtual void monitored_barrier(std::optional<std::chrono::milliseconds> timeout = std::nullopt, bool wait_all_ranks = false) = 0;

  // How many collectives this group has issued (the sequence number of the next one).
  virtual uint64_t sequence() const = 0;
  // Where this rank is, for the report of a collective that times out ("rank 1 is at step 41
  // (forward), collective #40 ..."): the training step and a phase, a string literal without spaces
  // ("forward", "backward", "optimizer", "evaluation", ...). Published with the rank's collective
  // progress, never on the hot path (it only records the values). DDP notes forward and backward
  // itself.
  virtual void note_progress(int64_t step, const char* phase) {}
  // The store the group met in (progress and diagnostics live there).
  virtual const std::shared_ptr<Store>& store() const = 0;

 private:
  int rank_;
  int size_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// A group on Gloo (TCP transport), formed through `store`: every rank calls it with the same
// store contents, its own rank and the same size. Blocks until all ranks have connected, or throws
// RendezvousError naming the ranks that did not arrive within options.timeout.
ProcessGroupPtr make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options = {});

}  // namespace dp::distributed
