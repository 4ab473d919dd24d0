#pragma once
// Vectorised building blocks of the softmax family and logsumexp: exp for float32 (AVX2 + FMA when
// the CPU has them: chosen at run time in a portable build, backend/cpu/cpu_dispatch.h; a scalar
// twin otherwise), row max / sum / dot with several accumulators.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include "backend/cpu/cpu_dispatch.h"

namespace dp::backend::cpu {

// exp(x) = 2^n * 2^f with n = round(x log2 e) and f in [-1/2, 1/2], 2^f by Cephes' exp2f polynomial:
// under 1 ulp for x in [-87.33, 88]. Softmax only needs x <= 0. x < -87.33 (including -inf) gives 0
// (denormal results are flushed); NaN gives NaN.
constexpr float kExpLo = -87.3365478515625f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLog2eLo = 1.925963033500011e-08f;  // log2(e) - kLog2e
constexpr float kRound = 12582912.0f + 127.0f;      // 1.5 * 2^23 (rounds to an integer) + the exponent bias
constexpr float kP0 = 1.535336188319500e-4f, kP1 = 1.339887440266574e-3f, kP2 = 9.618437357674640e-3f, kP3 = 5.550332471162809e-2f,
                kP4 = 2.402264791363012e-1f, kP5 = 6.931472028550421e-1f;

inline float exp_f32(float x) {
  if (x != x) return x;
  if (x < kExpLo) return 0.0f;
  const float t = std::fma(x, kLog2e, kRound);  // its low mantissa bits hold n + 127
  const float n = t - kRound;
  const float f = std::fma(x, kLog2eLo, std::fma(x, kLog2e, -n));
  float p = std::fma(kP0, f, kP1);
  p = std::fma(p, f, kP2);
  p = std::fma(p, f, kP3);
  p = std::fma(p, f, kP4);
  p = std::fma(p, f, kP5);
  p = std::fma(p, f, 1.0f);
  return p * std::bit_cast<float>(std::bit_cast<int32_t>(t) << 23);
}

#if DP_HAVE_AVX2_PATHS
// Eight lanes of exp_f32 (the compiler does not vectorise it by itself: its tests are branches
// under the default -ftrapping-math).
DP_TARGET_AVX2 inline __m256 exp_f32x8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(kExpLo);
  const __m256 round = _mm256_set1_ps(kRound);
  // Lanes below lo (-inf from attention masks, large negative differences) compute exp(0) and are
  // zeroed at the end: clamping them to lo instead gives a subnormal intermediate 2^f * 2^-126, and
  // each subnormal result costs a microcode assist (masked softmax rows ran 16x slower). NaN is
  // not below lo and stays NaN.
  const __m256 below = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 xc = _mm256_andnot_ps(below, x);
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2e), round);
  const __m256 n = _mm256_sub_ps(t, round);
  __m256 f = _mm256_fmsub_ps(xc, _mm256_set1_ps(kLog2e), n);
  f = _mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2eLo), f);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), f, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));  // 2^n
  return _mm256_andnot_ps(below, _mm256_mul_ps(p, scale));
}
#endif

// Sum of 16 partial results, pairwise, fully unrolled (the partials stay in registers).
template <typename T>
inline T combine16(T* s) {
  for (int k = 0; k < 8; ++k) s[k] += s[k + 8];
  for (int k = 0; k < 4; ++k) s[k] += s[k + 4];
  return (s[0] + s[2]) + (s[1] + s[3]);
}

#if DP_HAVE_AVX2_PATHS
DP_TARGET_AVX2 inline float hsum8(__m256 v) {
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
DP_TARGET_AVX2 inline float hmax8(__m256 v) {
  const __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_max_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}
// Lanes [0, r) set, r in [0, 8].
DP_TARGET_AVX2 inline __m256i tail_mask(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

#if DP_HAVE_AVX2_PATHS
// row_max's float32 body: the largest of p[0, i), i the multiple of 8 it stops at (n >= 8).
DP_TARGET_AVX2 inline float row_max_avx2(const float* p, int64_t n, int64_t& i) {
  __m256 s0 = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), s1 = s0, s2 = s0, s3 = s0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_max_ps(s0, _mm256_loadu_ps(p + i));
    s1 = _mm256_max_ps(s1, _mm256_loadu_ps(p + i + 8));
    s2 = _mm256_max_ps(s2, _mm256_loadu_ps(p + i + 16));
    s3 = _mm256_max_ps(s3, _mm256_loadu_ps(p + i + 24));
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_max_ps(s0, _mm256_loadu_ps(p + i));
  return hmax8(_mm256_max_ps(_mm256_max_ps(s0, s1), _mm256_max_ps(s2, s3)));
}
#endif

// Largest element (NaN elements may be skipped: callers get NaN through the arithmetic anyway).
template <typename T>
inline T row_max(const T* p, int64_t n) {
  int64_t i = 0;
  T m = -std::numeric_limits<T>::infinity();
  if constexpr (std::is_same_v<T, float>) {
#if DP_HAVE_AVX2_PATHS
    if (n >= 8 && cpu_has_avx2_fma()) m = row_max_avx2(p, n, i);
#endif
  } else if (n >= 32) {
    T s[16];
    for (int k = 0; k < 16; ++k) s[k] = p[k];
    for (i = 16; i + 16 <= n; i += 16)
      for (int k = 0; k < 16; ++k) s[k] = std::max(s[k], p[i + k]);
    for (int k = 0; k < 16; ++k) m = std::max(m, s[k]);
  }
  for (; i < n; ++i) m = std::max(m, p[i]);
  return m;
}

template <typename T>
inline T row_sum(const T* p, int64_t n) {
  if (n < 32) {
    T t = 0;
    for (int64_t i = 0; i < n; ++i) t += p[i];
    return t;
  }
  T s[16];
  for (int k = 0; k < 16; ++k) s[k] = p[k];
  int64_t i = 16;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) s[k] += p[i + k];
  T t = 0;
  for (; i < n; ++i) t += p[i];
  return combine16(s) + t;
}

template <typename T>
inline T row_dot(const T* a, const T* b, int64_t n) {
  if (n < 32) {
    T t = 0;
    for (int64_t i = 0; i < n; ++i) t += a[i] * b[i];
    return t;
  }
  T s[16];
  for (int k = 0; k < 16; ++k) s[k] = a[k] * b[k];
  int64_t i = 16;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) s[k] += a[i + k] * b[i + k];
  T t = 0;
  for (; i < n; ++i) t += a[i] * b[i];
  return combine16(s) + t;
}

#if DP_HAVE_AVX2_PATHS
// exp_diff's float32 body: all n elements (j ends at n); returns their sum when Sum.
template <bool Sum>
DP_TARGET_AVX2 inline float exp_diff_avx2(const float* a, const float* b, float bs, float* out, int64_t n, int64_t& j) {
  const __m256 vs = _mm256_set1_ps(bs);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; j + 16 <= n; j += 16) {
    const __m256 b0 = b ? _mm256_loadu_ps(b + j) : vs;
    const __m256 b1 = b ? _mm256_loadu_ps(b + j + 8) : vs;
    const __m256 e0 = exp_f32x8(_mm256_sub_ps(_mm256_loadu_ps(a + j), b0));
    const __m256 e1 = exp_f32x8(_mm256_sub_ps(_mm256_loadu_ps(a + j + 8), b1));
    _mm256_storeu_ps(out + j, e0);
    _mm256_storeu_ps(out + j + 8, e1);
    if constexpr (Sum) {
      acc0 = _mm256_add_ps(acc0, e0);
      acc1 = _mm256_add_ps(acc1, e1);
    }
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_f32x8(_mm256_sub_ps(_mm256_loadu_ps(a + j), b ? _mm256_loadu_ps(b + j) : vs));
    _mm256_storeu_ps(out + j, e);
    if constexpr (Sum) acc0 = _mm256_add_ps(acc0, e);
  }
  if (j < n) {  // 1 to 7 left: one masked load (masked stores are slow on some cores: copy out)
    const __m256i mask = tail_mask(n - j);
    const __m256 bv = b ? _mm256_maskload_ps(b + j, mask) : vs;
    const __m256 e = _mm256_and_ps(exp_f32x8(_mm256_sub_ps(_mm256_maskload_ps(a + j, mask), bv)), _mm256_castsi256_ps(mask));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, e);
    for (int k = 0; j + k < n; ++k) out[j + k] = lanes[k];
    if constexpr (Sum) acc1 = _mm256_add_ps(acc1, e);
    j = n;
  }
  return Sum ? hsum8(_mm256_add_ps(acc0, acc1)) : 0.0f;
}
#endif

// out[j] = exp(a[j] - b[j]) (b per element) or exp(a[j] - bs) (b null); returns the sum of the
// out[j] when Sum. out may alias a.
template <typename T, bool Sum>
inline T exp_diff(const T* a, const T* b, T bs, T* out, int64_t n) {
  int64_t j = 0;
  T total = 0;
  if constexpr (std::is_same_v<T, float>) {
#if DP_HAVE_AVX2_PATHS
    if (cpu_has_avx2_fma()) total = exp_diff_avx2<Sum>(a, b, bs, out, n, j);
#endif
    for (; j < n; ++j) {
      out[j] = exp_f32(a[j] - (b ? b[j] : bs));
      if constexpr (Sum) total += out[j];
    }
  } else {
    for (; j < n; ++j) out[j] = std::exp(a[j] - (b ? b[j] : bs));
    if constexpr (Sum) total = row_sum(out, n);
  }
  return total;
}

}  // namespace dp::backend::cpu
