#pragma once
// CUDA fused optimizer updates (src/backend/cuda/optim.cu): the per-element math of
// backend/cpu/fused_updates.h (PyTorch 1.13's foreach=False sequence, the same roundings: every
// multiply-add that PyTorch fuses is an fma, nothing else is contracted), applied to every
// parameter of a list in a few multi-tensor launches, as PyTorch's foreach/fused paths do: a small
// table of pointers, sizes and per-tensor scalars goes in the kernel's arguments, and each thread
// block updates one chunk of one tensor. Work is queued on the current stream of `device`;
// nothing waits for it. float32, float64, float16 and bfloat16 (the CPU kernels' dtypes; the 16-bit
// ones computed in float32, one rounding per stored value).
//
// This header needs no CUDA headers: the optimizers (src/optim/*.cpp) include it, and the launch
// planning below is plain C++ so it is tested on every machine.
#include <cstddef>
#include <cstdint>
#include <vector>
#include "dp/core/dtype.h"
#include "dp/core/errors.h"
#include "backend/optim_kernels.h"

namespace dp::backend::cuda::optim {

// Elements one thread block updates (its threads stride through the chunk).
constexpr int64_t kChunk = 8192;
// Tensors per launch: the table is a kernel argument, and must stay well under the 4 KiB that
// every CUDA version accepts (Adam's table is about 2.3 KiB at 32).
constexpr int kMaxTensorsPerLaunch = 32;

// One launch of a multi-tensor update: tensors [first, first + count) of the list, `blocks`
// thread blocks (one per chunk, over all its tensors).
struct MultiTensorLaunch {
  size_t first = 0;
  size_t count = 0;
  int64_t blocks = 0;
};

// Cuts a list of tensor sizes into launches of at most max_tensors tensors each, in order. Empty
// tensors take no block (the caller may leave them out). A launch's grid must fit CUDA's
// 2^31 - 1 blocks in x: a launch is also cut before it would exceed that, and a single tensor
// needing more (2^31 chunks of 8192 elements: none in practice) is an error.
inline std::vector<MultiTensorLaunch> plan_launches(const std::vector<int64_t>& numels, int max_tensors = kMaxTensorsPerLaunch,
                                                    int64_t chunk = kChunk) {
  DP_CHECK(max_tensors > 0 && chunk > 0, ValueError, "plan_launches: max_tensors (", max_tensors, ") and chunk (", chunk, ") must be positive");
  constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;
  std::vector<MultiTensorLaunch> out;
  MultiTensorLaunch cur;
  for (size_t i = 0; i < numels.size(); ++i) {
    DP_CHECK(numels[i] >= 0, ValueError, "plan_launches: tensor ", i, " has a negative size ", numels[i]);
    const int64_t blocks = (numels[i] + chunk - 1) / chunk;
    DP_CHECK(blocks <= kMaxBlocks, ValueError, "CUDA optimizer update: tensor ", i, " has ", numels[i], " elements, more than one launch can cover (",
             kMaxBlocks, " chunks of ", chunk, ")");
    if (cur.count == static_cast<size_t>(max_tensors) || cur.blocks + blocks > kMaxBlocks) {
      out.push_back(cur);
      cur = MultiTensorLaunch{i, 0, 0};
    }
    if (cur.count == 0) cur.first = i;
    ++cur.count;
    cur.blocks += blocks;
  }
  if (cur.count > 0) out.push_back(cur);
  return out;
}

// The interface's per-parameter entries (backend/optim_kernels.h).
using backend::AdamTensor;
using backend::SgdTensor;

#if DP_HAVE_CUDA
// Every tensor of `list` is of `dtype` (float32, float64, float16 or bfloat16) and on cuda:`device`. `s.step` is
// ignored by adam_update_kernel (each tensor has its own).
void sgd_update_kernel(DType dtype, int device, const std::vector<SgdTensor>& list, const backend::SgdScalars& s);
void adam_update_kernel(DType dtype, int device, const std::vector<AdamTensor>& list, const backend::AdamScalars& s);
#endif

}  // namespace dp::backend::cuda::optim
