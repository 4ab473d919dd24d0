// gloo calls on flat host buffers (gloo_collectives.h).
#include "distributed/gloo_collectives.h"
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include "distributed/gloo_reduce.h"
#include "dp/core/errors.h"

namespace dp::distributed::detail {
namespace {

// gloo's own collectives use slot prefixes 0x01-0x08; ours must not meet their messages.
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;

// The element type only gives gloo the element size; the reduce function knows the real type.
template <typename T>
void allreduce_as(const GlooCall& call, void* data, size_t count, ReduceFn fn) {
  gloo::AllreduceOptions opts(call.context);
  opts.setOutput(static_cast<T*>(data), count);
  opts.setReduceFunction(fn);
  opts.setTag(call.tag);
  opts.setTimeout(call.timeout);
  gloo::allreduce(opts);
}

// What is left of the operation's time, at least 1 ms (gloo reads 0 as "no timeout").
std::chrono::milliseconds remaining(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() < 1 ? std::chrono::milliseconds(1) : left;
}

}  // namespace

void gloo_allreduce(const GlooCall& call, void* data, size_t count, DType wire, ReduceOp op) {
  if (count == 0) return;
  const ReduceFn fn = reduce_function(wire, op);
  switch (element_size(wire)) {
    case 1:
      return allreduce_as<uint8_t>(call, data, count, fn);
    case 2:
      return allreduce_as<uint16_t>(call, data, count, fn);
    case 4:
      return allreduce_as<uint32_t>(call, data, count, fn);
    case 8:
      return allreduce_as<uint64_t>(call, data, count, fn);
  }
  throw DTypeError(dp::detail::str("allreduce: dtype ", dtype_name(wire), " cannot be reduced by gloo directly"));
}

void gloo_broadcast(const GlooCall& call, void* data, size_t bytes, int root) {
  if (bytes == 0) return;
  gloo::BroadcastOptions opts(call.context);
  opts.setOutput(static_cast<uint8_t*>(data), bytes);
  opts.setRoot(root);
  opts.setTag(call.tag);
  opts.setTimeout(call.timeout);
  gloo::broadcast(opts);
}

void gloo_allgather(const GlooCall& call, const void* input, void* output, size_t bytes) {
  if (bytes == 0) return;
  gloo::AllgatherOptions opts(call.context);
  // gloo only reads the input; its API takes a non-const pointer.
  if (input != nullptr) opts.setInput(static_cast<uint8_t*>(const_cast<void*>(input)), bytes);
  opts.setOutput(static_cast<uint8_t*>(output), bytes * static_cast<size_t>(call.context->size));
  opts.setTag(call.tag);
  opts.setTimeout(call.timeout);
  gloo::allgather(opts);
}

// Ring: at step s rank r sends chunk (r - s - 1) to rank r + 1 and receives chunk (r - s - 2) from
// rank r - 1, adding it into its own copy; after size - 1 steps chunk r has passed every rank and
// is complete on rank r. One send and one receive in flight per step.
void gloo_reduce_scatter(const GlooCall& call, void* data, void* recv, size_t count, DType wire, ReduceOp op) {
  const int size = call.context->size;
  const int rank = call.context->rank;
  if (size == 1 || count == 0) return;
  const ReduceFn fn = reduce_function(wire, op);
  const size_t chunk = count * element_size(wire);
  auto send_buf = call.context->createUnboundBuffer(data, chunk * static_cast<size_t>(size));
  auto recv_buf = call.context->createUnboundBuffer(recv, chunk);
  const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, call.tag);
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  const auto deadline = std::chrono::steady_clock::now() + call.timeout;
  auto* bytes = static_cast<uint8_t*>(data);
  for (int s = 0; s < size - 1; ++s) {
    const int send_chunk = ((rank - s - 1) % size + size) % size;
    const int recv_chunk = ((rank - s - 2) % size + size) % size;
    send_buf->send(right, slot, static_cast<size_t>(send_chunk) * chunk, chunk);
    recv_buf->recv(left, slot, 0, chunk);
    if (!recv_buf->waitRecv(remaining(deadline))) throw gloo::IoException("reduce_scatter: receive aborted");
    uint8_t* target = bytes + static_cast<size_t>(recv_chunk) * chunk;
    fn(target, target, recv, count);
    // The next step sends the chunk just reduced; this one's send must be done first (one pending
    // operation per unbound buffer).
    if (!send_buf->waitSend(remaining(deadline))) throw gloo::IoException("reduce_scatter: send aborted");
  }
}

void gloo_barrier(const GlooCall& call) {
  gloo::BarrierOptions opts(call.context);
  opts.setTag(call.tag);
  opts.setTimeout(call.timeout);
  gloo::barrier(opts);
}

}  // namespace dp::distributed::detail
