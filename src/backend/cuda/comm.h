#pragma once
// The reduction kernel behind reduce_add_coalesced and DataParallel's gradient sum on CUDA devices
// (src/backend/cuda/comm.cu). Host header: no CUDA headers needed.
#include <cstdint>
#include <vector>
#include "dp/core/dtype.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"

namespace dp::backend::cuda {

// out[i] = ins[0][i] + ins[1][i] + ... for n elements of `dtype` (bool: logical or), added in the
// order of `ins` (16-bit floats accumulate in float), queued on `stream`. Every pointer is memory the
// stream's device can read: its own, or another logical device's on the same GPU, or a peer's with
// access enabled (enable_peer_access). out may be ins[0]; ins must not be empty.
void sum_into(void* out, const std::vector<const void*>& ins, int64_t n, DType dtype, const Stream& stream);

}  // namespace dp::backend::cuda
