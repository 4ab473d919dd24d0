#pragma once
// Moving tensors between devices for data parallelism (torch.nn.parallel.comm and its autograd
// functions): scatter, gather, broadcast, reduce.
//
//   auto chunks = dp::parallel::scatter(x, {"cpu:0", "cpu:1"});          // [15,5], [15,5] from [30,5]
//   dp::Tensor y = dp::parallel::gather({y0, y1}, "cpu:0");               // [30,2]
//
// scatter and gather are differentiable (each one's backward is the other, so double backward
// works too). broadcast_coalesced and reduce_add_coalesced work below autograd, as PyTorch's comm
// functions do; replicate() (dp/parallel/replicate.h) is the differentiable parameter broadcast.
//
// Host memory: every CPU device ("cpu", "cpu:0", "cpu:1", ...) shares the machine's memory, so a
// scatter to CPU devices returns views of the input relabelled to each device (no copy), just as
// PyTorch returns views for chunks that stay on the input's own device. Such views share the
// input's version counter: autograd sees an in-place write through any of them. broadcast and
// reduce always produce fresh tensors.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>
#include "dp/core/tensor.h"

namespace dp::parallel {

inline constexpr size_t kDefaultBufferSize = size_t{10} << 20;  // 10 MiB, PyTorch's bucket size

// Splits `tensor` along `dim` (negative counts from the end) and puts chunk i on devices[i].
// Without chunk_sizes: torch.chunk's rule, ceil(B / n) rows per chunk, so there may be fewer chunks
// than devices (10 rows on 4 devices: 3,3,3,1; 5 rows on 4: 2,2,1); B == 0 gives n empty chunks.
// With chunk_sizes: one size per device, non-negative, summing to B. Chunks that stay on the
// input's device, or move between CPU devices, are views; others are copies.
// Backward: the chunks' gradients are gathered back onto the input's device (missing ones as zeros).
std::vector<Tensor> scatter(const Tensor& tensor, const std::vector<Device>& devices,
                            const std::optional<std::vector<int64_t>>& chunk_sizes = std::nullopt, int64_t dim = 0);

// Concatenates `tensors` along `dim` into a new tensor on `destination` (any device, the host
// "cpu" included). Sizes must agree except along `dim`; dtypes must agree. If every input is 0-dim
// and dim == 0, they are gathered into a vector, with PyTorch's warning.
// Backward: the output's gradient is split with the forward sizes back onto each input's device.
Tensor gather(const std::vector<Tensor>& tensors, Device destination, int64_t dim = 0);

// Copies every tensor (all on devices[0]) to each device: result[j][i] is tensors[i] on devices[j];
// result[0] are the inputs themselves; the others are fresh tensors with their own version
// counters. Between host-memory devices each tensor is copied straight into its own result (a
// memory copy has no per-transfer cost to amortise). Between CUDA devices tensors are packed per
// dtype into buckets of at most buffer_size bytes, one transfer per bucket and device (NCCL between
// distinct GPUs when available, else peer or device-to-device copies); the results on each device
// are then views into that device's bucket buffers (sharing its version counter), as PyTorch's.
// Not differentiable (see replicate()).
std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors, const std::vector<Device>& devices,
                                                     size_t buffer_size = kDefaultBufferSize);
// One tensor to each device (result[0] is the tensor itself when devices[0] is its device).
std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<Device>& devices);

// Sums inputs[j][i] over j (inputs[j] is the j-th device's list, every list alike in sizes and
// dtypes) into fresh tensors on `destination`: result[i]. Sums run in one pass over all tensors,
// in device order (inputs[0] + inputs[1] + ...), split across the devices' workers when large.
// CUDA inputs are packed into buckets as in broadcast_coalesced and summed on the destination by
// NCCL (distinct GPUs) or a sum kernel; the results are views into one buffer per bucket.
// Not differentiable.
std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& inputs, Device destination, size_t buffer_size = kDefaultBufferSize);
// One tensor from each device.
Tensor reduce_add(const std::vector<Tensor>& inputs, Device destination);

// The chunk sizes scatter uses for `batch` rows over n devices (torch.chunk's rule).
std::vector<int64_t> chunk_sizes(int64_t batch, int64_t n);
// Sizes that use every device while there are rows for it: floor or ceil of batch / n, the first
// batch % n devices taking one more (10 rows on 4 devices: 3,3,2,2; 2 rows on 4: 1,1).
std::vector<int64_t> balanced_sizes(int64_t batch, int64_t n);

}  // namespace dp::parallel
