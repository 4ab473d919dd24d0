#pragma once
// The paths of broadcast_coalesced and of the gradient reduction for devices with their own memory
// (src/parallel/comm_device.cpp): tensors packed per dtype into buckets (coalesce.h), one transfer
// per bucket and device; one collective call when the backend's collective library covers the
// devices (CUDA: NCCL between distinct GPUs); otherwise copies (peer or device-to-device) and the
// backend's k-way sum kernel, reading other devices' buffers in place where it can (virtual
// devices of one GPU, or peers). The device work is the backend's (backend/comm_kernels.h).
// Ordering between devices is by events on their current streams (DeviceRuntime::wait_stream): the
// consumer's stream waits for the producer's, and a source buffer is not reused before the reader
// is done (its stream waits back). Nothing waits on the host.
#include <cstddef>
#include <vector>
#include "dp/core/tensor.h"
#include "parallel/reduce.h"

namespace dp::parallel::detail {

// broadcast_coalesced for a list of devices of one type off the host (arguments checked by the
// caller): result[0] are the tensors themselves, result[j] views into one fresh buffer per bucket on
// devices[j].
std::vector<std::vector<Tensor>> device_broadcast_coalesced(const std::vector<Tensor>& tensors, const std::vector<Device>& devices,
                                                            size_t buffer_size);

// reduce_sum (reduce.h) where an input or the destination is off the host.
std::vector<Tensor> device_reduce_sum(const std::vector<std::vector<Tensor>>& inputs, const std::vector<TensorSpec>& specs, Device destination,
                                      size_t buffer_size);

}  // namespace dp::parallel::detail
