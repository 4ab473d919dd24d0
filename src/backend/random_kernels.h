#pragma once
// The kernel interface of the random ops that draw from a Philox stream (implemented by the CPU
// backend in src/backend/cpu/random.cpp and norm_kernels.cpp and by the CUDA backend in
// src/backend/cuda/copy.cu, with one stream layout, so one Generator state gives the same values
// on both).
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
// randint's fill: element i of t (contiguous, any dtype) = low + w % range converted to t's dtype,
// w the 64-bit word i % 2 (words 2(i%2), 2(i%2)+1) of Philox block first + i / 2; range = high - low
// (> 0, as uint64; the sum wraps as int64).
using RandintFill = void(const Tensor& t, uint64_t seed, uint64_t first, int64_t low, uint64_t range);
// randperm's Fisher-Yates shuffle: out (int64, contiguous, [n]) = 0, 1, ..., n - 1, then swap
// number s (s = 0 .. n - 2) exchanges positions i = n - 1 - s and j = w % (i + 1), w the 64-bit word
// s % 2 of block first + s / 2. Sequential by nature.
using RandpermFill = void(const Tensor& out, uint64_t seed, uint64_t first);

// How many Philox blocks n draws take at per_block draws a block (what an op reserves).
inline uint64_t blocks_for(int64_t n, int per_block) { return static_cast<uint64_t>((n + per_block - 1) / per_block); }

DP_DECLARE_KERNEL(random_fill_kernel, RandomFill);
DP_DECLARE_KERNEL(randint_fill_kernel, RandintFill);
DP_DECLARE_KERNEL(randperm_fill_kernel, RandpermFill);
DP_DECLARE_KERNEL(dropout_forward_kernel, DropoutForward);
DP_DECLARE_KERNEL(dropout_apply_kernel, DropoutApply);

}  // namespace dp::backend
