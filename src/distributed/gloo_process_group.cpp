// GlooProcessGroup: argument checks, the operation queue and the communication thread
// (gloo_process_group.h), and make_gloo_process_group.
#include "distributed/gloo_process_group.h"
#include <map>
#include <gloo/context.h>
#include <gloo/transport/pair.h>
#include "distributed/failure_notice.h"
#include "distributed/gloo_errors.h"
#include "distributed/gloo_fingerprint.h"
#include "distributed/gloo_monitored_barrier.h"
#include "distributed/gloo_reduce.h"
#include "distributed/shm_allreduce.h"
#include "distributed/sigpipe_block.h"
#include "dp/core/errors.h"
#include "dp/distributed/errors.h"

namespace dp::distributed {
namespace detail {
namespace {

// Collective tags use the low 31 bits of the sequence number; the debug fingerprints set the top bit.
uint32_t tag_of(uint64_t sequence) { return static_cast<uint32_t>(sequence & 0x7fffffffu); }

// How long a timed-out rank lets the others' progress reach the store before reading it, and how
// long it waits for the store to answer.
constexpr std::chrono::milliseconds kProgressSettle{150};
constexpr std::chrono::milliseconds kProgressReadBudget{1000};
// How long a failing rank may spend on the store telling the others (failure_notice.h).
constexpr std::chrono::milliseconds kNoticeBudget{300};

void check_defined(const char* op, const std::vector<Tensor>& tensors, const char* what) {
  for (size_t i = 0; i < tensors.size(); ++i) DP_CHECK(tensors[i].defined(), ValueError, op, ": ", what, " ", i, " is an undefined tensor");
}

void check_avg_dtype(const char* op, ReduceOp reduce, const Tensor& t, size_t index) {
  DP_CHECK(reduce != ReduceOp::Avg || is_floating_point(t.dtype()), ValueError, op, ": ReduceOp::Avg needs floating-point tensors, but tensor ",
           index, " is ", dtype_name(t.dtype()), " (use Sum and divide, or convert)");
}

// Indices of the tensors of each dtype, dtypes in DType order (the same on every rank), empty
// tensors left out.
std::vector<std::vector<size_t>> group_by_dtype(const std::vector<Tensor>& tensors) {
  std::map<DType, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].numel() > 0) groups[tensors[i].dtype()].push_back(i);
  std::vector<std::vector<size_t>> out;
  for (auto& [dtype, items] : groups) out.push_back(std::move(items));
  return out;
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(GlooConnection connection, std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                                   bool debug)
    : ProcessGroup(rank, size),
      options_(std::move(options)),
      store_(std::move(store)),
      connection_(std::move(connection)),
      debug_(debug),
      progress_(connection_.group_store, rank),
      inline_access_(std::make_shared<InlineAccess>()) {
  inline_access_->group = this;
  thread_ = std::thread([this] { loop(); });
}

GlooProcessGroup::~GlooProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(inline_access_->mu);  // waits for an inline operation to finish
    inline_access_->group = nullptr;
  }
  std::deque<Op> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (Op& op : dropped)
    op.work->finish(std::make_exception_ptr(
        DistributedError(dp::detail::str(who(), " was destroyed before ", op.name, " #", op.sequence, " ran (it was still queued)"))));
  thread_.join();
}

std::string GlooProcessGroup::who() const { return dp::detail::str("process group '", options_.name, "' (rank ", rank(), " of ", size(), ")"); }

uint64_t GlooProcessGroup::sequence() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_sequence_;
}

WorkPtr GlooProcessGroup::enqueue(const char* name, std::vector<Tensor> outputs, std::string description, std::function<void(const GlooCall&)> run) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t sequence = next_sequence_++;
  auto work = std::make_shared<Work>(name, sequence);
  work->set_outputs(std::move(outputs));
  if (broken_) {
    const std::exception_ptr error = unusable_error(broken_, options_.name, rank(), size());
    lock.unlock();
    work->finish(error);
    return work;
  }
  queue_.push_back(Op{work, name, sequence, std::move(description), std::move(run)});
  lock.unlock();
  cv_.notify_one();
  // The raw pointer: the function is the work's own, so the work outlives every call of it.
  work->set_inline_runner([access = inline_access_, raw = work.get()] {
    std::lock_guard<std::mutex> guard(access->mu);
    if (access->group != nullptr) access->group->run_inline(raw);
  });
  return work;
}

void GlooProcessGroup::run_inline(const Work* work) {
  Op op;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || running_ || broken_ || queue_.empty() || queue_.front().work.get() != work) return;
    op = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
  }
  execute(op);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  cv_.notify_all();  // the communication thread may take the next one
}

void GlooProcessGroup::loop() {
  for (;;) {
    Op op;
    std::exception_ptr broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (stop_ && !running_) || (!queue_.empty() && !running_); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
      broken = broken_;
      running_ = true;
    }
    if (broken) {
      op.work->finish(unusable_error(broken, options_.name, rank(), size()));
    } else {
      execute(op);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
    }
  }
}

void GlooProcessGroup::execute(Op& op) {
  progress_.publish(op.sequence, op.name, /*finished=*/false);
  const auto start = std::chrono::steady_clock::now();
  const OpLabel label{options_.name, rank(), size(), op.name, op.sequence, {}};
  const GlooCall call{connection_.context, tag_of(op.sequence), options_.timeout};
  try {
    SigpipeBlock no_sigpipe;
    if (debug_) check_same_collective(call, label, op.description);
    op.run(call);
  } catch (...) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    auto read_others = [&] {
      // The ranks behind may have published their position only just now.
      std::this_thread::sleep_for(kProgressSettle);
      return read_progress(connection_.group_store, size(), kProgressReadBudget);
    };
    OpLabel where = label;
    where.position = progress_.position();
    const std::exception_ptr error =
        spread_failure(translate_operation_error(std::current_exception(), where, connection_.peers, waited, read_others));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_) broken_ = error;
    }
    op.run = nullptr;  // release the tensors before waking the waiters
    op.work->finish(error);
    return;
  }
  progress_.publish(op.sequence, op.name, /*finished=*/true);
  op.run = nullptr;
  op.work->finish();
}

// Tells the other ranks (failure_notice.h) and closes this rank's connections, so that every rank
// blocked on this one fails now instead of at its timeout; a lost peer that turns out to have closed
// on purpose, after losing another rank, is reported as that other rank.
std::exception_ptr GlooProcessGroup::spread_failure(std::exception_ptr error) {
  int culprit = -1;
  try {
    std::rethrow_exception(error);
  } catch (const PeerLostError& e) {
    culprit = e.peer_rank();
    const std::optional<FailureNotice> first = read_failure_notice(connection_.group_store, kNoticeBudget);
    if (first && first->writer == e.peer_rank() && first->culprit >= 0 && first->culprit != rank()) {
      culprit = first->culprit;
      error =
          std::make_exception_ptr(PeerLostError(dp::detail::str(e.what(), "; rank ", first->writer, " closed its connections after it had lost rank ",
                                                                first->culprit, " (", first->text, ")"),
                                                first->culprit, e.operation(), e.sequence()));
    }
  } catch (const CollectiveTimeout& e) {
    if (!e.ranks_behind().empty()) culprit = e.ranks_behind().front();
  } catch (...) {
  }
  std::string text;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    text = e.what();
  } catch (...) {
    text = "unknown error";
  }
  publish_failure_notice(connection_.group_store, FailureNotice{rank(), culprit, text}, kNoticeBudget);
  if (connection_.shm) connection_.shm->abort();
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    try {
      if (auto& pair = connection_.context->getPair(peer)) pair->close();
    } catch (...) {
      // Already broken: nothing left to close.
    }
  }
  return error;
}

// ---- allreduce ----

WorkPtr GlooProcessGroup::allreduce(std::vector<Tensor> tensors, ReduceOp op) { return allreduce_impl(std::move(tensors), op, false); }
WorkPtr GlooProcessGroup::allreduce_compressed(std::vector<Tensor> tensors, ReduceOp op) { return allreduce_impl(std::move(tensors), op, true); }

WorkPtr GlooProcessGroup::allreduce_impl(std::vector<Tensor> tensors, ReduceOp op, bool compressed) {
  DP_CHECK(!tensors.empty(), ValueError, "allreduce: no tensors given");
  check_defined("allreduce", tensors, "tensor");
  for (size_t i = 0; i < tensors.size(); ++i) check_avg_dtype("allreduce", op, tensors[i], i);
  HostStaging staging = HostStaging::stage(tensors, /*read=*/true, /*write=*/true);
  std::vector<std::vector<size_t>> groups = group_by_dtype(staging.host);
  std::string description = debug_ ? dp::detail::str("allreduce(", describe_tensors(tensors), "; ", reduce_op_name(op), ")") : std::string();
  return enqueue("allreduce", std::move(tensors), std::move(description),
                 [this, staging = std::move(staging), groups = std::move(groups), op, compressed](const GlooCall& call) {
                   for (const auto& items : groups) reduce_dtype_group(call, staging.host, items, op, compressed);
                   staging.finish();
                 });
}

// One gloo call for the tensors `items` (all of one dtype). A single contiguous tensor whose dtype
// travels as it is (not Float16/BFloat16) is reduced in its own memory: the DDP bucket path.
void GlooProcessGroup::reduce_dtype_group(const GlooCall& call, const std::vector<Tensor>& host, const std::vector<size_t>& items, ReduceOp op,
                                          bool compressed) {
  const Tensor& first = host[items.front()];
  const DType dtype = first.dtype();
  const DType wire = wire_dtype(dtype, compressed);
  const size_t es = element_size(wire);
  size_t count = 0;
  for (size_t i : items) count += static_cast<size_t>(host[i].numel());
  const bool direct = items.size() == 1 && wire == dtype && first.is_contiguous();
  void* buffer = direct ? first.data_ptr() : scratch_.get(count * es);
  if (!direct) {
    size_t offset = 0;
    for (size_t i : items) {
      pack(host[i], static_cast<uint8_t*>(buffer) + offset * es, wire);
      offset += static_cast<size_t>(host[i].numel());
    }
  }
  if (connection_.shm)
    connection_.shm->allreduce(buffer, count, wire, op, call.timeout);
  else
    gloo_allreduce(call, buffer, count, wire, op);
  if (op == ReduceOp::Avg && size() > 1) scale_in_place(buffer, wire, count, 1.0 / size());
  if (!direct) {
    size_t offset = 0;
    for (size_t i : items) {
      unpack(static_cast<const uint8_t*>(buffer) + offset * es, wire, host[i]);
      offset += static_cast<size_t>(host[i].numel());
    }
  }
}

// ---- broadcast ----

WorkPtr GlooProcessGroup::broadcast(std::vector<Tensor> tensors, int root) {
  DP_CHECK(!tensors.empty(), ValueError, "broadcast: no tensors given");
  check_defined("broadcast", tensors, "tensor");
  DP_CHECK(root >= 0 && root < size(), ValueError, "broadcast: root ", root, " is not a rank of ", who(), " (ranks are 0 to ", size() - 1, ")");
  const bool is_root = rank() == root;
  HostStaging staging = HostStaging::stage(tensors, /*read=*/is_root, /*write=*/!is_root);
  std::string description = debug_ ? dp::detail::str("broadcast(", describe_tensors(tensors), "; root ", root, ")") : std::string();
  return enqueue("broadcast", std::move(tensors), std::move(description), [this, staging = std::move(staging), root](const GlooCall& call) {
    broadcast_tensors(call, staging.host, root);
    staging.finish();
  });
}

// Bytes are bytes: every tensor, whatever its dtype, travels in one buffer (one gloo call).
void GlooProcessGroup::broadcast_tensors(const GlooCall& call, const std::vector<Tensor>& host, int root) {
  if (host.size() == 1 && host[0].is_contiguous()) return gloo_broadcast(call, host[0].data_ptr(), host[0].nbytes(), root);
  size_t bytes = 0;
  for (const Tensor& t : host) bytes += t.nbytes();
  auto* buffer = static_cast<uint8_t*>(scratch_.get(bytes));
  const bool is_root = rank() == root;
  if (is_root) {
    size_t offset = 0;
    for (const Tensor& t : host) {
      pack(t, buffer + offset, t.dtype());
      offset += t.nbytes();
    }
  }
  gloo_broadcast(call, buffer, bytes, root);
  if (!is_root) {
    size_t offset = 0;
    for (const Tensor& t : host) {
      unpack(buffer + offset, t.dtype(), t);
      offset += t.nbytes();
    }
  }
}

// ---- allgather ----

WorkPtr GlooProcessGroup::allgather(std::vector<Tensor> outputs, const Tensor& input) {
  DP_CHECK(input.defined(), ValueError, "allgather: the input is an undefined tensor");
  check_defined("allgather", outputs, "output");
  DP_CHECK(static_cast<int>(outputs.size()) == size(), ValueError, "allgather: ", outputs.size(), " output tensors given, ", who(), " needs ", size(),
           " (one per rank)");
  for (size_t r = 0; r < outputs.size(); ++r) {
    DP_CHECK(outputs[r].sizes() == input.sizes(), ShapeError, "allgather: output ", r, " has shape ", outputs[r].size_str(), ", the input has shape ",
             input.size_str(), " (every output must be shaped like the input)");
    DP_CHECK(outputs[r].dtype() == input.dtype(), DTypeError, "allgather: output ", r, " is ", dtype_name(outputs[r].dtype()), ", the input is ",
             dtype_name(input.dtype()));
  }
  HostStaging in = HostStaging::stage({input}, /*read=*/true, /*write=*/false);
  HostStaging out = HostStaging::stage(outputs, /*read=*/false, /*write=*/true);
  std::string description = debug_ ? dp::detail::str("allgather(", describe_tensors({input}), " -> ", outputs.size(), " outputs)") : std::string();
  return enqueue("allgather", std::move(outputs), std::move(description), [this, in = std::move(in), out = std::move(out)](const GlooCall& call) {
    allgather_tensors(call, out.host, in.host[0]);
    out.finish();
  });
}

void GlooProcessGroup::allgather_tensors(const GlooCall& call, const std::vector<Tensor>& outputs, const Tensor& input) {
  const size_t bytes = input.nbytes();
  if (bytes == 0) return;
  auto* gathered = static_cast<uint8_t*>(scratch_.get(bytes * static_cast<size_t>(size())));
  const void* source = nullptr;
  if (input.is_contiguous()) {
    source = input.data_ptr();
  } else {
    pack(input, gathered + static_cast<size_t>(rank()) * bytes, input.dtype());  // gloo's in-place form
  }
  gloo_allgather(call, source, gathered, bytes);
  for (size_t r = 0; r < outputs.size(); ++r) unpack(gathered + r * bytes, input.dtype(), outputs[r]);
}

// ---- reduce_scatter ----

WorkPtr GlooProcessGroup::reduce_scatter(const Tensor& output, std::vector<Tensor> inputs, ReduceOp op) {
  DP_CHECK(output.defined(), ValueError, "reduce_scatter: the output is an undefined tensor");
  check_defined("reduce_scatter", inputs, "input");
  DP_CHECK(static_cast<int>(inputs.size()) == size(), ValueError, "reduce_scatter: ", inputs.size(), " input tensors given, ", who(), " needs ",
           size(), " (one per rank)");
  for (size_t r = 0; r < inputs.size(); ++r) {
    DP_CHECK(inputs[r].sizes() == output.sizes(), ShapeError, "reduce_scatter: input ", r, " has shape ", inputs[r].size_str(),
             ", the output has shape ", output.size_str(), " (every input must be shaped like the output)");
    DP_CHECK(inputs[r].dtype() == output.dtype(), DTypeError, "reduce_scatter: input ", r, " is ", dtype_name(inputs[r].dtype()), ", the output is ",
             dtype_name(output.dtype()));
  }
  check_avg_dtype("reduce_scatter", op, output, 0);
  HostStaging in = HostStaging::stage(inputs, /*read=*/true, /*write=*/false);
  HostStaging out = HostStaging::stage({output}, /*read=*/false, /*write=*/true);
  std::string description =
      debug_ ? dp::detail::str("reduce_scatter(", describe_tensors({output}), " x ", inputs.size(), "; ", reduce_op_name(op), ")") : std::string();
  return enqueue("reduce_scatter", {output}, std::move(description), [this, in = std::move(in), out = std::move(out), op](const GlooCall& call) {
    reduce_scatter_tensors(call, out.host[0], in.host, op);
    out.finish();
  });
}

void GlooProcessGroup::reduce_scatter_tensors(const GlooCall& call, const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  const size_t count = static_cast<size_t>(output.numel());
  if (count == 0) return;
  const DType wire = wire_dtype(output.dtype());
  const size_t chunk = count * element_size(wire);
  auto* data = static_cast<uint8_t*>(scratch_.get(chunk * inputs.size()));
  for (size_t r = 0; r < inputs.size(); ++r) pack(inputs[r], data + r * chunk, wire);
  gloo_reduce_scatter(call, data, recv_scratch_.get(chunk), count, wire, op);
  uint8_t* mine = data + static_cast<size_t>(rank()) * chunk;
  if (op == ReduceOp::Avg && size() > 1) scale_in_place(mine, wire, count, 1.0 / size());
  unpack(mine, wire, output);
}

// ---- barriers ----

WorkPtr GlooProcessGroup::barrier() {
  return enqueue("barrier", {}, debug_ ? std::string("barrier()") : std::string(), [](const GlooCall& call) { gloo_barrier(call); });
}

void GlooProcessGroup::monitored_barrier(std::optional<std::chrono::milliseconds> timeout, bool wait_all_ranks) {
  const uint64_t n = monitored_barriers_.fetch_add(1);
  store_monitored_barrier(*connection_.group_store, who(), rank(), size(), n, timeout.value_or(options_.timeout), wait_all_ranks);
}

}  // namespace detail

ProcessGroupPtr make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options) {
  DP_CHECK(store != nullptr, ValueError, "make_gloo_process_group: the store is null (rank ", rank, ", size ", size, ")");
  DP_CHECK(size >= 1, ValueError, "make_gloo_process_group: size ", size, " is not a group size (at least 1)");
  DP_CHECK(rank >= 0 && rank < size, ValueError, "make_gloo_process_group: rank ", rank, " is not in [0, ", size, ") for size ", size);
  DP_CHECK(options.timeout.count() > 0, ValueError, "make_gloo_process_group: timeout ", options.timeout.count(), " ms is not positive");
  DP_CHECK(!options.name.empty() && options.name.find('/') == std::string::npos, ValueError, "make_gloo_process_group: group name '", options.name,
           "' must be non-empty and without '/' (it is a store key prefix)");
  const bool debug = detail::distributed_debug_enabled();  // read now: a malformed value fails before connecting
  // Gloo's I/O thread (made while connecting) and the group's threads inherit a blocked SIGPIPE.
  detail::SigpipeBlock no_sigpipe;
  detail::GlooConnection connection = detail::connect_gloo(store, rank, size, options);
  connection.shm = detail::ShmChannel::connect(*connection.group_store, rank, size, options.timeout);
  if (options.bind_address.empty()) options.bind_address = "127.0.0.1";
  return std::make_shared<detail::GlooProcessGroup>(std::move(connection), std::move(store), rank, size, std::move(options), debug);
}

}  // namespace dp::distributed
