#pragma once
// The kernel interface of the transfers between devices of one type that DataParallel's coalesced
// broadcast and gradient reduction use (src/parallel/comm_device.cpp) when the devices have their
// own memory. Implemented by the CUDA backend (NCCL, peer access, a k-way sum kernel). The host's
// CPU devices share memory: nothing to transfer, and the CPU backend registers only the k-way sum
// (src/backend/cpu/comm.cpp), which reduce_sum (src/parallel/reduce.cpp) calls on each range of
// its split.
#include <cstddef>
#include <cstdint>
#include <vector>
#include "backend/kernel_stub.h"
#include "dp/core/dtype.h"
#include "dp/core/stream.h"

namespace dp::backend {

// True when a collective library covers these devices (device indices), so one collective call
// replaces the copies.
using CollectiveUsable = bool(const std::vector<int>& devices);
// buffers[k] (count elements of dtype on devices[k]) = buffers[root], one collective call.
using CollectiveBroadcast = void(const std::vector<void*>& buffers, int64_t count, DType dtype, const std::vector<int>& devices, size_t root);
// out (on devices[root]) = the element-wise sum of inputs[k] (on devices[k]).
using CollectiveReduce = void(const std::vector<const void*>& inputs, void* out, int64_t count, DType dtype, const std::vector<int>& devices,
                              size_t root);
// True when `device` can read `peer`'s memory in place (enabling it if it can be).
using PeerAccess = bool(int device, int peer);
// out = the element-wise sum of ins (n elements each, all readable from the stream's device), in
// input order (16-bit floats accumulate in float; bool: any), queued on `stream` (the host's
// stream on the CPU: it runs in the calling thread).
using SumInto = void(void* out, const std::vector<const void*>& ins, int64_t n, DType dtype, const Stream& stream);

DP_DECLARE_KERNEL(collective_usable_kernel, CollectiveUsable);
DP_DECLARE_KERNEL(collective_broadcast_kernel, CollectiveBroadcast);
DP_DECLARE_KERNEL(collective_reduce_kernel, CollectiveReduce);
DP_DECLARE_KERNEL(peer_access_kernel, PeerAccess);
DP_DECLARE_KERNEL(sum_into_kernel, SumInto);

}  // namespace dp::backend
