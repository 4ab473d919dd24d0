// The CPU backend's random fills (random_kernels.h): the Philox stream walked on the host, split
// over threads for large tensors (random_blocks.h); randperm's shuffle in one thread.
#include <cmath>
#include <utility>
#include "backend/cpu/random_blocks.h"
#include "backend/random_kernels.h"
#include "backend/dispatch.h"

namespace dp::backend::cpu {
namespace {

using cpu::for_blocks;

// U[a, b) for floating types (the unit draw: philox::uniform_unit).
template <typename T>
void uniform(T* p, int64_t count, uint64_t seed, uint64_t first, double from, double to) {
  if constexpr (backend::is_float_v<T>) {
    const double range = to - from;
    for_blocks(seed, first, count, philox::uniform_per_block<T>(),
               [&](int64_t i, const uint32_t* w, int k) { p[i] = backend::convert<T>(from + range * philox::uniform_unit<T>(w, k)); });
  }
}

// N(mean, std) by Box-Muller (philox::normal_pair), both normals of a block used.
template <typename T>
void normal(T* p, int64_t count, uint64_t seed, uint64_t first, double mean, double std) {
  if constexpr (backend::is_float_v<T>) {
    for_blocks(seed, first, count, philox::kNormalPerBlock, [p, mean, std, z0 = 0.0, z1 = 0.0](int64_t i, const uint32_t* w, int k) mutable {
      if (k == 0) philox::normal_pair(w, z0, z1);
      p[i] = backend::convert<T>(mean + std * (k == 0 ? z0 : z1));
    });
  }
}

template <typename T>
void bernoulli(T* out, int64_t count, uint64_t seed, uint64_t first, double p) {
  for_blocks(seed, first, count, philox::kBernoulliPerBlock,
             [&](int64_t i, const uint32_t* w, int k) { out[i] = backend::convert<T>(philox::bernoulli(w, k, p)); });
}

void random_fill_kernel(RandomKind kind, const Tensor& t, uint64_t seed, uint64_t first, double a, double b) {
  static constexpr const char* kNames[] = {"uniform_", "normal_", "bernoulli_"};
  backend::dispatch_all(t.dtype(), kNames[static_cast<int>(kind)], [&]<typename T>() {
    T* p = t.numel() ? t.data_ptr<T>() : nullptr;
    const int64_t n = t.numel();
    switch (kind) {
      case RandomKind::Uniform:
        uniform<T>(p, n, seed, first, a, b);
        return;
      case RandomKind::Normal:
        normal<T>(p, n, seed, first, a, b);
        return;
      case RandomKind::Bernoulli:
        bernoulli<T>(p, n, seed, first, a);
        return;
    }
  });
}

void randint_fill_kernel(const Tensor& t, uint64_t seed, uint64_t first, int64_t low, uint64_t range) {
  backend::dispatch_all(t.dtype(), "randint", [&]<typename T>() {
    T* p = t.numel() ? t.data_ptr<T>() : nullptr;
    for_blocks(seed, first, t.numel(), 2, [&](int64_t i, const uint32_t* w, int k) {
      p[i] = backend::convert<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + philox::word64(w, k) % range));
    });
  });
}

void randperm_fill_kernel(const Tensor& out, uint64_t seed, uint64_t first) {
  const int64_t n = out.numel();
  if (n == 0) return;
  int64_t* perm = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for_blocks(
      seed, first, n - 1, 2,
      [&](int64_t s, const uint32_t* w, int k) {
        const int64_t i = n - 1 - s;
        const int64_t j = static_cast<int64_t>(philox::word64(w, k) % static_cast<uint64_t>(i + 1));
        std::swap(perm[i], perm[j]);
      },
      /*parallel=*/false);
}

}  // namespace

void register_random_kernels() {
  DP_REGISTER_KERNEL(CPU, random_fill_kernel);
  DP_REGISTER_KERNEL(CPU, randint_fill_kernel);
  DP_REGISTER_KERNEL(CPU, randperm_fill_kernel);
}

}  // namespace dp::backend::cpu
