// Stream semantics of backward passes: see backward_streams.h.
#include "autograd/backward_streams.h"
#if DP_HAVE_CUDA
#include <algorithm>

namespace dp::autograd::detail {
namespace {

// `stream` will read g's memory: the caching allocator must not reuse it on its allocation stream
// until that use is done. Memory from elsewhere (a wrapped external buffer) is its owner's concern.
void mark_used_on(const Tensor& g, const cuda::Stream& stream) {
  void* ptr = g.storage() ? g.storage()->data() : nullptr;
  if (ptr == nullptr) return;
  if (cuda::caching_allocator(stream.device()).block_size(ptr) == 0) return;
  cuda::record_stream(ptr, stream);
}

// `waiter` waits for the work queued on `producer` so far.
void wait_for(const cuda::Stream& waiter, const cuda::Stream& producer) {
  cuda::Event ready;
  ready.record(producer);
  waiter.wait(ready);
}

}  // namespace

cuda::Stream sync_gradient(const Tensor& g, const Node& consumer) {
  const int device = g.device().index;
  const cuda::Stream producer = cuda::current_stream(device);
  const std::optional<cuda::Stream>& own = consumer.stream();
  const cuda::Stream target = own && own->device() == device ? *own : cuda::Stream::default_stream(device);
  if (target != producer) {
    wait_for(target, producer);
    mark_used_on(g, target);
  }
  return target;
}

void add_leaf_stream(std::vector<cuda::Stream>& streams, const cuda::Stream& stream) {
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
}

void sync_caller(const std::vector<cuda::Stream>& leaf_streams) {
  for (const cuda::Stream& leaf : leaf_streams) {
    const cuda::Stream caller = cuda::current_stream(leaf.device());
    if (caller != leaf) wait_for(caller, leaf);
  }
}

}  // namespace dp::autograd::detail
#endif
