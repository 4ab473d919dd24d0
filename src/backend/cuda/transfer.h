#pragma once
// Copies that involve a CUDA device (src/backend/cuda/transfer.cpp), for dp::to and Tensor::copy_.
#include "dp/core/tensor.h"

namespace dp::backend::cuda {

// dst <- src converted to dst's dtype and broadcast to dst's shape, where at least one of them is
// on a CUDA device (host, CUDA and CUDA, or two CUDA devices). Host -> device: a pageable source
// goes through a pinned staging buffer and the host does not wait; a pinned source with
// non_blocking is copied asynchronously. Device -> host: the host waits for the copy (on the
// current stream of the source device) unless non_blocking and dst is pinned. Between devices:
// the destination's current stream waits for the source's, then a peer copy.
void copy_across_kernel(const Tensor& dst, const Tensor& src, bool non_blocking);
// True if p is page-locked host memory (cudaHostAlloc / cudaHostRegister).
bool is_pinned(const void* p);
// A host tensor in page-locked memory (freed with cudaFreeHost), for fast and asynchronous copies.
Tensor empty_pinned(IntArrayRef sizes, DType dtype);

}  // namespace dp::backend::cuda
