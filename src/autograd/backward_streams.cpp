// Stream semantics of backward passes: see backward_streams.h.
#include "autograd/backward_streams.h"
#include <algorithm>
#include "dp/core/device_runtime.h"
#include "dp/core/errors.h"

namespace dp::autograd::detail {
namespace {

const DeviceRuntime& runtime_of(Device d) {
  const DeviceRuntime* rt = device_runtime(d.type);
  DP_CHECK(rt != nullptr, DeviceError, "backward: no runtime for ", d.str(), " (a tensor on a device this build has no backend for)");
  return *rt;
}

}  // namespace

Stream sync_gradient(const Tensor& g, const Node& consumer) {
  const Device device = g.device();
  const DeviceRuntime& rt = runtime_of(device);
  const Stream producer = rt.current_stream(device.index);
  const Stream& own = consumer.stream();
  const Stream target = own.device() == device ? own : rt.default_stream(device.index);
  if (target != producer) {
    rt.wait_stream(target, producer);
    // `target` will read g's memory: the caching allocator must not reuse it on its allocation
    // stream until that use is done.
    if (g.storage()) rt.record_stream(g.storage()->data(), target);
  }
  return target;
}

void add_leaf_stream(std::vector<Stream>& streams, const Stream& stream) {
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
}

void sync_caller(const std::vector<Stream>& leaf_streams) {
  for (const Stream& leaf : leaf_streams) {
    const DeviceRuntime& rt = runtime_of(leaf.device());
    const Stream caller = rt.current_stream(leaf.device().index);
    if (caller != leaf) rt.wait_stream(caller, leaf);
  }
}

}  // namespace dp::autograd::detail
