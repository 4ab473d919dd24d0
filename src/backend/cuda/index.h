#pragma once
// CUDA kernels of the index ops (src/backend/cuda/index.cu), called by src/ops/index.cpp after its
// argument checks, and the bad-input flag the CUDA index and loss kernels report through.
//
// Out-of-range indices. The CPU ops throw an IndexError before returning, and callers rely on it
// (a bad token id must not train silently). PyTorch's CUDA ops use a device-side assert instead,
// which is asynchronous but poisons the CUDA context for good. Here a kernel that meets an index
// outside [0, bound) skips it (never reads or writes through it) and raises a HostFlag: an int in
// mapped pinned host memory, written with a plain store. The op queues its kernels first and only
// then waits for its stream (cudaStreamSynchronize of the current stream: no device-wide
// synchronisation, other streams and devices keep running) and reads the flag; if it is raised,
// the caller re-reads the indices on the host and throws the CPU's exact IndexError. That wait is
// the price of a synchronous error and is paid only by ops whose indices come from the user
// (index_select, gather, scatter_add, index_add, embedding, nll_loss / cross_entropy targets);
// the backward passes reuse indices the forward already checked and never wait. While the stream
// is being captured into a CUDA graph no wait is allowed: the check is off (bad indices are
// skipped silently, as in PyTorch's graphs, where only its device asserts would catch them).
#include <cstdint>
#include "dp/core/scalar.h"
#include "dp/core/tensor.h"

struct CUstream_st;

namespace dp::backend::cuda {

namespace detail {

// This host thread's flag (allocated on first use, cleared on construction). Kernels get
// device_ptr(); raised() waits for `stream` and reads it. Not reentrant: one live HostFlag per
// thread at a time (ops create one around their launches).
class HostFlag {
 public:
  HostFlag();
  ~HostFlag();
  HostFlag(const HostFlag&) = delete;
  HostFlag& operator=(const HostFlag&) = delete;
  // The pointer kernels store 1 through; `stream` is where they are queued. Null while `stream`
  // is being captured into a CUDA graph (no check there: kernels take null as "do not report").
  int* device_ptr(CUstream_st* stream);
  // Waits for the work queued on the stream given to device_ptr() and returns whether a kernel
  // raised the flag (false if device_ptr() was never called).
  bool raised();

 private:
  volatile int* host_;
  int* device_;
  CUstream_st* stream_ = nullptr;
  bool pending_ = false;
};

}  // namespace detail

// Every position p of out's shape: out[p] = src[p + index[p] * step], where src and index are
// views with out's shape (stride 0 where they broadcast; src's indexed dim has stride 0) and step
// is the indexed dim's stride in src, in elements. out and src have one dtype (elements are moved
// as bits); index is int32 or int64. An index outside [0, bound) writes 0 and, with check, raises
// the flag. Returns true when check and an index was out of range (after waiting, see above).
bool index_gather(const Tensor& out, const Tensor& src, const Tensor& index, int64_t step, int64_t bound, bool check);

// self[p + index[p] * step] += src[p] for every position p of self's shape, with self, src and
// index views as above (self's indexed dim has stride 0). Atomic adds: repeated indices add up in
// an unspecified order, so float sums may differ in the last bits between runs (as PyTorch's
// index_add / scatter_add / embedding backward on CUDA). An index equal to skip adds nothing
// (embedding's padding row; -1 for none); one outside [0, bound) adds nothing and, with check,
// raises the flag. Returns true when check and an index was out of range.
bool index_scatter_add(const Tensor& self, const Tensor& src, const Tensor& index, int64_t step, int64_t bound, int64_t skip, bool check);

// Whether an element of `index` (contiguous, int32 or int64, on a CUDA device) lies outside
// [0, bound). Waits for the current stream. For the in-place ops, which must not write at all
// when an index is bad.
bool index_out_of_range(const Tensor& index, int64_t bound);

// out = mask ? value : a, a and mask broadcast to out's shape (masked_fill).
void masked_fill_kernel(const Tensor& out, const Tensor& a, const Tensor& mask, const Scalar& value);

}  // namespace dp::backend::cuda
