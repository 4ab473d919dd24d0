#pragma once
// NCCL collectives between CUDA devices of this process (src/backend/cuda/nccl.cpp), for DataParallel's
// parameter broadcast and gradient reduction across distinct GPUs. One communicator set per device
// list (ncclCommInitAll), made on first use and kept for the life of the process. Built without
// NCCL (DP_HAVE_NCCL 0) collective_usable_kernel() is false and callers copy and reduce with kernels instead.
#include <cstdint>
#include <vector>
#include "dp/core/dtype.h"

namespace dp::backend::cuda::nccl {

// True if NCCL can run a collective over these logical devices: dparallel was built with NCCL, there
// are at least two, and they are distinct GPUs (NCCL can't put two ranks of a communicator on one
// GPU, so virtual devices sharing a GPU never qualify).
bool collective_usable_kernel(const std::vector<int>& devices);

// buffers[i] (count elements of dtype on devices[i]) <- buffers[root], each device's part queued on
// its current stream. Throws DeviceError if !collective_usable_kernel(devices).
void collective_broadcast_kernel(const std::vector<void*>& buffers, int64_t count, DType dtype, const std::vector<int>& devices, size_t root);

// out (on devices[root]) <- sum over i of inputs[i] (on devices[i]); bool: logical or. Each device's
// part is queued on its current stream. out may be inputs[root]. Throws DeviceError if !collective_usable_kernel(devices).
void collective_reduce_kernel(const std::vector<const void*>& inputs, void* out, int64_t count, DType dtype, const std::vector<int>& devices,
                              size_t root);

}  // namespace dp::backend::cuda::nccl
