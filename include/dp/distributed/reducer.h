#pragma once
// The reducer of DistributedDataParallel: all-reduces parameter gradients in buckets while the
// backward pass is still running, so communication overlaps the rest of the backward.
//
//  - Buckets: the parameters in reverse registration order (roughly the order backward produces
//    their gradients), grouped per (dtype, device); the first bucket holds about
//    first_bucket_mb (1 MiB), the others bucket_cap_mb (25 MiB). Each bucket is one flat buffer,
//    and each parameter's .grad becomes a view into it, so no copy is made on the way to the
//    network or back (PyTorch's gradient_as_bucket_view).
//  - A bucket is launched when its last gradient is ready (post-accumulate-grad hook), and only
//    after every earlier bucket has been launched: every rank issues the same collectives in the
//    same order, whatever order its gradients arrive in.
//  - At the end of every backward pass (an autograd callback, dp/autograd/callback.h) the
//    parameters this pass did not reach are marked ready with zeros and the remaining buckets are
//    launched, so ranks that took different branches never wait for each other, and no flag is
//    needed. A per-parameter "used" mark travels with the last bucket: a parameter no rank used
//    keeps an undefined .grad (as PyTorch). backward() returns when every bucket is reduced.
//  - Gradients are averaged over ranks (Mean), or summed (Sum) after forward_loss already divided
//    by the global row count.
//  - Sync control: while any no_sync guard is alive, or between accumulate(k)'s k-th backward
//    passes, gradients only accumulate locally; the decision is taken when a backward pass starts,
//    so a guard around forward+backward and a guard around backward alone both work.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "dp/core/tensor.h"
#include "dp/distributed/process_group.h"

namespace dp::distributed {

enum class GradReduction { Mean, Sum };

// One bucket handed to a comm hook.
struct GradBucket {
  size_t index = 0;  // position in launch order
  bool is_last = false;
  Tensor buffer;  // the flat gradients of `parameters` (each .grad is a view into it)
  std::vector<Tensor> parameters;
  std::vector<int64_t> offsets;  // each parameter's first element in `buffer`
  ReduceOp op = ReduceOp::Avg;   // what the hook must compute: Avg (mean over ranks) or Sum
};

// Replaces the bucket's allreduce. Returns a Work that, when completed, means `bucket.buffer`
// holds the reduced gradients (e.g. a Work from group.allreduce, or one extended with then()).
using CommHook = std::function<WorkPtr(ProcessGroup& group, GradBucket& bucket)>;

struct ReducerOptions {
  double first_bucket_mb = 1.0;
  double bucket_cap_mb = 25.0;
};

// Timings of the last synchronised backward pass, for benchmarks and the overlap report.
struct ReducerStats {
  int buckets = 0;
  int64_t bytes = 0;            // gradient bytes reduced
  double backward_ms = 0;       // first gradient ready -> end of the pass's nodes
  double communication_ms = 0;  // first bucket launched -> last bucket reduced
  double exposed_ms = 0;        // end of the pass's nodes -> every bucket reduced (backward() waited)
  // The share of communication that ran while backward still computed: 1 - exposed / communication.
  double hidden_fraction() const { return communication_ms > 0 ? 1.0 - exposed_ms / communication_ms : 0.0; }
};

class Reducer {
 public:
  // `params`: the parameters to reduce (requiring grad), `names` theirs for error messages.
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, ProcessGroupPtr group, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each forward: a backward pass that started but never finished (it threw) leaves the
  // ranks out of step; that is reported here (DistributedError), and the state is reset.
  void prepare_forward();
  // How the next backward pass combines gradients across ranks (forward_loss: Sum).
  void set_next_reduction(GradReduction r);
  // Marks the start of a backward pass that reaches this model's output (the model's outputs carry
  // a hook calling it), so the end-of-pass reduction runs even if no parameter got a gradient here.
  void on_backward_reached_output();

  // Inside a Join (dp/distributed/join.h): the next pass's Mean divides by `divisor` ranks instead
  // of the group size (0: the group size). Not with a comm hook (it averages itself).
  void set_next_divisor(int divisor);
  // A finished rank inside a Join: the collectives of one synchronised backward pass of the ranks
  // still training (every bucket in order, and the used marks), with zeros; this rank's own .grad
  // stays untouched.
  void shadow_pass(GradReduction reduction);
  bool has_comm_hook() const;

  void register_comm_hook(CommHook hook);
  void push_no_sync();
  void pop_no_sync();
  // Synchronise on every k-th backward pass only (k >= 1; 1 = every pass, the default).
  void accumulate(int k);
  // Whether the next backward pass will synchronise gradients, and whether the last one did.
  bool will_sync() const;
  bool last_backward_synced() const;
  // How many backward passes synchronised so far (the optimizer steps, in the usual loop).
  int64_t synced_passes() const;

  // Bucket layout (indices into params, in launch order), for tests and tuning.
  std::vector<std::vector<size_t>> bucket_indices() const;
  ReducerStats stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<Tensor> params_;
  std::vector<std::pair<size_t, int>> hook_ids_;  // (parameter index, hook id)
};

}  // namespace dp::distributed
