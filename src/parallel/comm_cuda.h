#pragma once
// The CUDA paths of broadcast_coalesced and of the gradient reduction (src/parallel/comm_cuda.cpp):
// tensors packed per dtype into buckets (coalesce.h), one transfer per bucket and device; NCCL
// between distinct GPUs when dparallel has it; otherwise copies (peer or device-to-device) and a
// k-way sum kernel that reads other devices' buffers in place where it can (virtual devices of one
// GPU, or peers). Ordering between devices is by events on their current streams: the consumer's
// stream waits for the producer's, and a source buffer is not reused before the reader is done (its
// stream waits back). Nothing waits on the host.
#include <cstddef>
#include <vector>
#include "dp/core/tensor.h"
#include "parallel/reduce.h"

namespace dp::parallel::detail {

// broadcast_coalesced for a list of CUDA devices (arguments checked by the caller): result[0] are
// the tensors themselves, result[j] views into one fresh buffer per bucket on devices[j].
std::vector<std::vector<Tensor>> cuda_broadcast_coalesced(const std::vector<Tensor>& tensors, const std::vector<Device>& devices,
                                                          size_t buffer_size);

// reduce_sum (reduce.h) where an input or the destination is a CUDA device.
std::vector<Tensor> cuda_reduce_sum(const std::vector<std::vector<Tensor>>& inputs, const std::vector<TensorSpec>& specs, Device destination,
                                    size_t buffer_size);

}  // namespace dp::parallel::detail
