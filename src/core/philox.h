#pragma once
// Philox4x32-10 and the mappings of its words to numbers: the one definition for host and device.
// dp::philox4x32 (src/core/generator.cpp, every CPU random fill) and the CUDA kernels
// (src/backend/cuda/copy.cu) both call these functions, so the CPU and a GPU draw the same numbers
// from the same (seed, counter); a mapping written twice could drift apart unnoticed, since the
// CUDA side rarely runs.
//
// The stream layout (src/ops/random.cpp's header comment): element i of a fill reads block
// first + i / per_block and, within it, word k = i % per_block (two 64-bit halves for 53-bit draws).
#include <cmath>
#include <cstdint>
#include <type_traits>
#include "dp/core/half.h"
#include "dp/core/macros.h"

namespace dp::philox {

DP_HOST_DEVICE DP_INLINE void rounds(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
#ifdef __CUDACC__
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

inline constexpr double k2pow53inv = 1.0 / 9007199254740992.0;  // 2^-53

// The 64-bit word `half` (0 or 1) of a block.
DP_HOST_DEVICE DP_INLINE uint64_t word64(const uint32_t* w, int half) { return (static_cast<uint64_t>(w[2 * half]) << 32) | w[2 * half + 1]; }
// Uniform in [0, 1) with 53 random bits.
DP_HOST_DEVICE DP_INLINE double u53(uint64_t x) { return static_cast<double>(x >> 11) * k2pow53inv; }
// Uniform in (0, 1] with 53 random bits (a logarithm's argument).
DP_HOST_DEVICE DP_INLINE double u53_open_zero(uint64_t x) { return static_cast<double>((x >> 11) + 1) * k2pow53inv; }

// uniform_: elements of dtype T per block (float64 takes 64 bits each, the others 32).
template <typename T>
DP_HOST_DEVICE constexpr int uniform_per_block() {
  return std::is_same_v<T, double> ? 2 : 4;
}
// uniform_'s unit draw for element k of a block: 53 bits (float64), 24 (float32), 11 (float16) or 8
// (bfloat16), so it is exactly representable in T and never rounds up to 1.
template <typename T>
DP_HOST_DEVICE DP_INLINE double uniform_unit(const uint32_t* w, int k) {
  if constexpr (std::is_same_v<T, double>)
    return u53(word64(w, k));
  else if constexpr (std::is_same_v<T, float>)
    return static_cast<double>(w[k] >> 8) * (1.0 / 16777216.0);
  else if constexpr (std::is_same_v<T, Half>)
    return static_cast<double>(w[k] >> 21) * (1.0 / 2048.0);
  else
    return static_cast<double>(w[k] >> 24) * (1.0 / 256.0);
}

// normal_: two standard normals per block (::sqrt etc.: dp's tensor ops of those names would hide them), by Box-Muller on its two 53-bit halves;
// element 2j of a fill is z0 of block j, element 2j + 1 its z1.
inline constexpr int kNormalPerBlock = 2;
DP_HOST_DEVICE DP_INLINE void normal_pair(const uint32_t* w, double& z0, double& z1) {
  const double r = ::sqrt(-2.0 * ::log(u53_open_zero(word64(w, 0))));
  const double theta = 2.0 * 3.14159265358979323846 * u53(word64(w, 1));
  z0 = r * ::cos(theta);
  z1 = r * ::sin(theta);
}

// bernoulli_: element k (0 or 1) of a block is 1 with probability p.
inline constexpr int kBernoulliPerBlock = 2;
DP_HOST_DEVICE DP_INLINE bool bernoulli(const uint32_t* w, int k, double p) { return u53(word64(w, k)) < p; }

// dropout: a keep decision per 32-bit word, four per block: word < threshold, where
// threshold = keep * 2^32 (keep < 1, so it fits in 32 bits).
inline constexpr int kDropoutPerBlock = 4;
DP_HOST_DEVICE DP_INLINE uint64_t dropout_threshold(double keep) { return static_cast<uint64_t>(keep * 4294967296.0); }
DP_HOST_DEVICE DP_INLINE bool dropout_keep(const uint32_t* w, int k, uint64_t threshold) { return w[k] < threshold; }

}  // namespace dp::philox
