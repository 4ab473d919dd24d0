#pragma once
// Between the tensors a collective names and the flat host buffers gloo works on: packing tensors
// (any strides) into a buffer and back, with Float16/BFloat16 widened to float32 on the way in and
// rounded once on the way out; reusable scratch memory; and CUDA tensors staged through host copies.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>
#include "dp/core/tensor.h"

namespace dp::distributed::detail {

// A growable 64-byte-aligned host buffer a group keeps between operations, so packing several
// tensors does not allocate on every call.
class ScratchBuffer {
 public:
  // At least `bytes` of memory (contents undefined); valid until the next call.
  void* get(size_t bytes);

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  size_t capacity_ = 0;
};

// Writes t's elements (row-major, whatever its strides) to dst as `dst_dtype`: t's own dtype (a
// copy of the bytes), or float32 for a Float16/BFloat16 tensor (widened exactly).
void pack(const Tensor& t, void* dst, DType dst_dtype);
// The inverse: t's elements from src; float32 into a Float16/BFloat16 tensor rounds each value once.
// Writes through data_ptr(): no autograd version bump (collectives are not differentiable).
void unpack(const void* src, DType src_dtype, const Tensor& t);

// The host tensors a collective works on. A CPU tensor is used as it is (cpu and cpu:i share host
// memory); a CUDA tensor gets a host copy, made on the issuing thread (so it sees the caller's
// stream order), and the result is copied back into it on the communication thread before the
// Work completes. Simple rather than fast: a CUDA-native backend (NCCL) is the fast path.
struct HostStaging {
  std::vector<Tensor> host;                          // one per tensor, in order
  std::vector<std::pair<Tensor, Tensor>> copy_back;  // (CUDA tensor, its host copy) for results

  // `read`: the operation reads the tensors' values (else a CUDA tensor's host copy is only
  // allocated); `write`: it writes results into them (to be copied back).
  static HostStaging stage(const std::vector<Tensor>& tensors, bool read, bool write);
  // On the communication thread, after the operation: CUDA tensors get their results.
  void finish() const;
};

}  // namespace dp::distributed::detail
