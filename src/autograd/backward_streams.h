#pragma once
// Stream semantics of backward passes (PyTorch's, see
// https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes), for the
// engine, on any device type with a runtime (dp/core/device_runtime.h); the host's stream is the
// calling thread, so none of this applies to host tensors:
//  - each node runs with the stream it recorded at creation current (Node::stream(): the stream
//    its forward op ran on), so backward is ordered after forward on every stream;
//  - a gradient produced on one stream and consumed on another is synchronised with an event
//    (sync_gradient), as PyTorch's InputBuffer::add;
//  - before backward()/grad() returns, the caller's current stream of each device waits for the
//    streams the leaves' gradients were written on (sync_caller), so `loss.backward(); opt.step();`
//    stays ordered whatever streams the forward used.
#include <vector>
#include "dp/autograd/node.h"
#include "dp/core/stream.h"

namespace dp::autograd::detail {

// A gradient `g` off the host is about to enter an input buffer of `consumer`; the calling thread
// is the producer's, right after producing it (every op queues on the current stream, so the
// producer's stream is the calling thread's current stream of g's device). Returns the stream the
// buffer's accumulation and the consumer's reads of g are ordered on, after making it wait for the
// producer's stream if they differ:
//  - the consumer's stream when the consumer runs on g's device;
//  - otherwise g's device's default stream (a multi-device node: its reads on that device go
//    through the device's default stream, as in PyTorch).
// g's memory is also marked as used on that stream (DeviceRuntime::record_stream), so the caching
// allocator does not hand it to the producer's stream again while the consumer's work may read it.
Stream sync_gradient(const Tensor& g, const Node& consumer);

// Adds `stream` to `streams` unless it is there (a graph task's leaf streams: few).
void add_leaf_stream(std::vector<Stream>& streams, const Stream& stream);

// Makes the calling thread's current stream of each leaf stream's device wait for it.
void sync_caller(const std::vector<Stream>& leaf_streams);

}  // namespace dp::autograd::detail
