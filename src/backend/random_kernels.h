#pragma once
// The kernel interface of the random ops that draw from a Philox stream (implemented by the CPU
// backend in src/backend/cpu/norm_kernels.cpp and by the CUDA backend in src/backend/cuda/copy.cu, with one
// stream layout, so one Generator state gives the same mask on both).
#include <cstdint>
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// Dropout's forward: element i is kept when word i % 4 of Philox block first + i / 4 (of `seed`)
// is below keep * 2^32; mask (bool) gets the keep flags and out = x * (kept * scale). x, mask, out
// contiguous on one device; x may be out.
using DropoutForward = void(const Tensor& x, double keep, double scale, uint64_t seed, uint64_t first, const Tensor& mask, const Tensor& out);
// out = x * (mask ? scale : 0) element-wise (the backward, and the in-place variant's noise); x may
// be out.
using DropoutApply = void(const Tensor& x, const Tensor& mask, double scale, const Tensor& out);

// The random fills of rand / randn / uniform_ / normal_ / bernoulli_ (src/ops/random.cpp), in the
// stream layout that file's header describes. t is contiguous; seed and first are the generator
// state the op reserved its blocks from. Uniform: U[a, b) (floating t); Normal: N(a, b) (mean,
// std; floating t); Bernoulli: 1 with probability a (any dtype).
enum class RandomKind { Uniform, Normal, Bernoulli };
using RandomFill = void(RandomKind kind, const Tensor& t, uint64_t seed, uint64_t first, double a, double b);

DP_DECLARE_KERNEL(random_fill, RandomFill);
DP_DECLARE_KERNEL(dropout_forward, DropoutForward);
DP_DECLARE_KERNEL(dropout_apply, DropoutApply);

}  // namespace dp::backend
