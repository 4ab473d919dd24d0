#pragma once
// Philox random fills on a CUDA device (src/backend/cuda/copy.cu), with the CPU's stream layout
// (src/ops/random.cpp): element i of a tensor filled from generator state (seed, first) reads the
// same words of the same Philox block as on the CPU, so uniforms and Bernoulli draws from one
// Generator state are bit-identical on both; normals agree to the last bits of the device's
// log/sin/cos. The *default* generators differ per device (dp::default_generator seeds each device
// with a mix of the user seed and the device), so, as in PyTorch, torch.rand on cuda:0 and on the
// CPU after one manual_seed give different numbers.
#include <cstdint>
#include "backend/random_kernels.h"
#include "dp/core/tensor.h"

namespace dp::backend::cuda {

using backend::RandomKind;
// backend/random_kernels.h's RandomFill: t contiguous on a CUDA device. Uniform: U[a, b); Normal: N(a, b) (mean, std); Bernoulli: P(1) = a
// (any dtype). Queued on the current stream.
void random_fill_kernel(RandomKind kind, const Tensor& t, uint64_t seed, uint64_t first, double a, double b);
// randint and randperm (backend/random_kernels.h's RandintFill, RandpermFill: the CPU's draws), on
// the current stream; randperm's shuffle is one thread (Fisher-Yates is sequential).
void randint_fill_kernel(const Tensor& t, uint64_t seed, uint64_t first, int64_t low, uint64_t range);
void randperm_fill_kernel(const Tensor& out, uint64_t seed, uint64_t first);

// Dropout with the CPU's mask (src/backend/cpu/norm_kernels.cpp): element i is kept when word i % 4
// of block first + i / 4 is below keep * 2^32; out = x * (kept * scale). x, mask (bool), out
// contiguous on one CUDA device; x may be out.
void dropout_forward_kernel(const Tensor& x, double keep, double scale, uint64_t seed, uint64_t first, const Tensor& mask, const Tensor& out);
// out = x * (mask * scale), any layouts (broadcasting as the element-wise launch).
void dropout_apply_kernel(const Tensor& x, const Tensor& mask, double scale, const Tensor& out);

}  // namespace dp::backend::cuda
