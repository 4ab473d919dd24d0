#pragma once
// The gloo calls of one collective on flat host buffers, through gloo's current API only
// (gloo::allreduce/broadcast/allgather/barrier with their Options; the legacy AllreduceRing<T>
// classes measured 3-4x slower). Each call carries the operation's tag and timeout. Debian's gloo
// has no reduce-scatter in that API (only the legacy ReduceScatterHalvingDoubling<T>), so
// reduce_scatter is a ring over gloo's unbound buffers: size-1 steps each moving 1/size of the
// data, half the traffic of an allreduce of everything followed by picking one slice.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include "dp/core/dtype.h"
#include "dp/distributed/process_group.h"

namespace gloo {
class Context;
}

namespace dp::distributed::detail {

// What every gloo call of one operation shares.
struct GlooCall {
  std::shared_ptr<gloo::Context> context;
  uint32_t tag = 0;  // unique among operations that may overlap in time: the sequence number
  std::chrono::milliseconds timeout{0};
};

// data[0..count) of dtype `wire` reduced in place across ranks (Avg reduces as Sum).
void gloo_allreduce(const GlooCall& call, void* data, size_t count, DType wire, ReduceOp op);
// root's bytes into every rank's data[0..bytes).
void gloo_broadcast(const GlooCall& call, void* data, size_t bytes, int root);
// output[r * bytes, (r + 1) * bytes) <- rank r's input. input may be null: then this rank's slice of
// output already holds its input.
void gloo_allgather(const GlooCall& call, const void* input, void* output, size_t bytes);
// data holds size chunks of `count` elements (chunk r for rank r); afterwards chunk rank() holds
// the reduction over ranks of everyone's chunk rank() (the other chunks are clobbered). recv is
// scratch of `count` elements.
void gloo_reduce_scatter(const GlooCall& call, void* data, void* recv, size_t count, DType wire, ReduceOp op);
void gloo_barrier(const GlooCall& call);

}  // namespace dp::distributed::detail
