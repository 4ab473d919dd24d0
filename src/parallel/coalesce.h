#pragma once
// Packing many tensors into few flat buffers, so a transfer between devices (or an NCCL call, or a
// reduction kernel launch) happens once per bucket instead of once per tensor: the coalescing of
// broadcast_coalesced and reduce_add_coalesced on CUDA devices. Device-independent tensor code.
#include <cstddef>
#include <vector>
#include "dp/core/tensor.h"
#include "parallel/reduce.h"

namespace dp::parallel::detail {

// Tensors that travel in one flat buffer: all of one dtype, at the given element offsets.
struct Bucket {
  DType dtype = kFloat32;
  std::vector<size_t> items;     // indices into the spec list, in order
  std::vector<int64_t> offsets;  // element offset of each item in the flat buffer
  int64_t numel = 0;
};

// Groups the tensors `which` (indices into specs) by dtype, keeping their order, into buckets of at
// most buffer_size bytes; a bucket is closed when the next tensor would overflow it, so a tensor
// larger than buffer_size gets a bucket of its own (as PyTorch's _take_tensors). Empty tensors are
// left out. Buckets come in the order they were closed, then the open ones by dtype.
std::vector<Bucket> plan_buckets(const std::vector<TensorSpec>& specs, const std::vector<size_t>& which, size_t buffer_size);

// A flat contiguous tensor on `device` holding tensors[item] at each item's offset (tensors is
// indexed like the specs); undefined entries read as zeros. Copies run on the device's current
// stream (and order after the sources' own, see Tensor::copy_).
Tensor pack(const Bucket& bucket, const std::vector<Tensor>& tensors, Device device);

// One tensor per item: a view of `flat` with the item's sizes (the views share flat's storage).
std::vector<Tensor> unpack(const Bucket& bucket, const Tensor& flat, const std::vector<TensorSpec>& specs);

// copies[k] <- originals[k] (alike in sizes and dtype; copies on `device`, originals anywhere) with
// one flat buffer per bucket moved to `device`: one transfer per bucket instead of one per tensor,
// then a copy on `device` into each tensor. For refreshing replicas on CUDA devices.
void copy_coalesced(const std::vector<Tensor>& originals, const std::vector<Tensor>& copies, Device device, size_t buffer_size = kDefaultBufferSize);

}  // namespace dp::parallel::detail
