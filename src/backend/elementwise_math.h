#pragma once
// Element math shared by the element-wise kernels: the computation type of each dtype, wrapping
// integer arithmetic, Scalar conversion, and the scalar functions of the activations and their
// derivatives. Plain functions (DP_HOST_DEVICE) so a CUDA backend can reuse them.
#include <cmath>
#include <cstring>
#if defined(__F16C__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif
#include <cstdint>
#include <limits>
#include <type_traits>
#include "dp/core/scalar.h"
#include "backend/dispatch.h"

namespace dp::backend {

// The type arithmetic runs in: float for the 16-bit floats (rounded once on store), else T.
template <typename T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMath<T>::type;

template <typename T>
DP_HOST_DEVICE DP_INLINE opmath_t<T> om(T v) {
  return static_cast<opmath_t<T>>(v);
}

// The result of a computation stored as element type T (16-bit floats rounded to nearest even).
template <typename T, typename V>
DP_HOST_DEVICE DP_INLINE T st(V v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

#if defined(__F16C__) && !defined(__CUDACC__)
// float16 <-> float32 in one instruction each (the portable conversions in half.h branch).
DP_INLINE float om(Half v) { return _cvtsh_ss(v.x); }
template <>
DP_INLINE Half st<Half, float>(float v) {
  return Half::from_bits(static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)));
}
#endif

// Integer arithmetic wraps (as PyTorch's does) instead of being undefined on signed overflow.
template <typename T>
DP_HOST_DEVICE DP_INLINE T wadd(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<T>(a + b);
  }
}
template <typename T>
DP_HOST_DEVICE DP_INLINE T wsub(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return static_cast<T>(a - b);
  }
}
template <typename T>
DP_HOST_DEVICE DP_INLINE T wmul(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
  } else {
    return a * b;
  }
}
template <typename T>
DP_HOST_DEVICE DP_INLINE T wneg(T a) {
  if constexpr (std::is_integral_v<T>)
    return wsub(T(0), a);
  else
    return -a;
}

// A Scalar as element type T (a float Scalar into an integer type truncates, as a C cast).
template <typename T>
inline T scalar_to(const Scalar& s) {
  if (s.is_floating_point()) return convert<T>(s.to_double());
  if (s.is_bool()) return convert<T>(s.to_int() != 0);
  return convert<T>(s.to_int());
}

template <typename T>
DP_HOST_DEVICE DP_INLINE bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

// Integer power by squaring; negative exponents follow PyTorch (1 and -1 keep their magnitude,
// everything else gives 0).
template <typename T>
DP_HOST_DEVICE inline T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  T result = 1;
  while (exp) {
    if (exp & 1) result = wmul(result, base);
    exp = static_cast<T>(exp >> 1);
    base = wmul(base, base);
  }
  return result;
}

// ---- float32 math the compiler can vectorise ----
// glibc's expf/logf/tanhf/erff are opaque calls, so a loop over them runs one element at a time.
// These are branch-free (selects only) versions of the Cephes single-precision routines (about 1-2
// ulp); the float-computing dtypes (float32, float16, bfloat16) use them, float64 uses libm.

DP_HOST_DEVICE DP_INLINE float f32_from_bits(int32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
DP_HOST_DEVICE DP_INLINE int32_t f32_to_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
// +inf and a quiet NaN from their bits (std::numeric_limits is host-only for nvcc).
DP_HOST_DEVICE DP_INLINE float f32_inf() { return f32_from_bits(0x7f800000); }
DP_HOST_DEVICE DP_INLINE float f32_qnan() { return f32_from_bits(0x7fc00000); }

// c ? a : b as bit operations: a conditional expression whose arms the compiler sees as possibly
// trapping (-ftrapping-math) would keep a branch in the loop and stop vectorisation.
DP_HOST_DEVICE DP_INLINE float sel(bool c, float a, float b) {
  const int32_t m = -static_cast<int32_t>(c);
  return f32_from_bits((f32_to_bits(a) & m) | (f32_to_bits(b) & ~m));
}

DP_HOST_DEVICE DP_INLINE double sel(bool c, double a, double b) {
  const int64_t m = -static_cast<int64_t>(c);
  int64_t ia, ib;
  std::memcpy(&ia, &a, 8);
  std::memcpy(&ib, &b, 8);
  const int64_t r = (ia & m) | (ib & ~m);
  double d;
  std::memcpy(&d, &r, 8);
  return d;
}

DP_HOST_DEVICE DP_INLINE float vexp(float x) {
  constexpr float hi = 88.7228394f, lo = -104.0f;
  // Clamped so that NaN lands in range too (every comparison with NaN is false): the float-to-int
  // cast of n below must never see NaN or a value out of int32's range (undefined behaviour).
  float xc = sel(x > lo, x, lo);
  xc = sel(xc < hi, xc, hi);
  const float n = std::nearbyint(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  // 2^n as two factors so that results in the subnormal range (n down to -150) stay exact.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float res = y * f32_from_bits((n1 + 127) << 23) * f32_from_bits((n2 + 127) << 23);
  float out = sel(x > hi, f32_inf(), res);
  out = sel(x < lo, 0.0f, out);
  return sel(x != x, x, out);
}

DP_HOST_DEVICE DP_INLINE float vlog(float x) {
  // Subnormal inputs are scaled into the normal range first.
  const bool sub = x < 1.17549435e-38f;
  const float xs = sel(sub, x * 8388608.0f, x);
  const int32_t bits = f32_to_bits(xs);
  const int32_t e = ((bits >> 23) & 0xff) - 126 - (static_cast<int32_t>(sub) * 23);
  const float m = f32_from_bits((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  const bool small = m < 0.707106781186547524f;
  const float t = sel(small, m + m - 1.0f, m - 1.0f);
  const float ef = static_cast<float>(e - static_cast<int32_t>(small));
  const float z = t * t;
  float y = 7.0376836292e-2f;
  y = y * t - 1.1514610310e-1f;
  y = y * t + 1.1676998740e-1f;
  y = y * t - 1.2420140846e-1f;
  y = y * t + 1.4249322787e-1f;
  y = y * t - 1.6668057665e-1f;
  y = y * t + 2.0000714765e-1f;
  y = y * t - 2.4999993993e-1f;
  y = y * t + 3.3333331174e-1f;
  y = y * t * z;
  y += -2.12194440e-4f * ef;
  y += -0.5f * z;
  float out = t + y + 0.693359375f * ef;
  out = sel(x == f32_inf(), x, out);
  out = sel(x == 0.0f, -f32_inf(), out);
  out = sel(x < 0.0f, f32_qnan(), out);
  return sel(x != x, x, out);
}

// log(1 + x) without losing the low bits of x: log(u) * x / (u - 1) with u = 1 + x rounded.
DP_HOST_DEVICE DP_INLINE float vlog1p(float x) {
  const float u = 1.0f + x;
  const float d = u - 1.0f;
  const float q = x / sel(d == 0.0f, 1.0f, d);
  float out = vlog(u) * q;
  out = sel(d == 0.0f, x, out);
  return sel(x == f32_inf(), x, out);
}

DP_HOST_DEVICE DP_INLINE float vtanh(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float big = std::copysign(1.0f - 2.0f / (vexp(ax + ax) + 1.0f), x);
  return sel(ax < 0.625f, small, big);
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), as PyTorch's vectorised erf.
DP_HOST_DEVICE DP_INLINE float verf(float x) {
  const float ax = std::fabs(x);
  const float t = 1.0f / (0.3275911f * ax + 1.0f);
  float r = 1.061405429f;
  r = r * t - 1.453152027f;
  r = r * t + 1.421413741f;
  r = r * t - 0.284496736f;
  r = r * t + 0.254829592f;
  return std::copysign(1.0f - r * t * vexp(-x * x), x);
}

// Dispatch: float gets the vectorisable versions, double libm.
DP_HOST_DEVICE DP_INLINE float m_exp(float x) { return vexp(x); }
DP_HOST_DEVICE DP_INLINE double m_exp(double x) { return std::exp(x); }
DP_HOST_DEVICE DP_INLINE float m_log(float x) { return vlog(x); }
DP_HOST_DEVICE DP_INLINE double m_log(double x) { return std::log(x); }
DP_HOST_DEVICE DP_INLINE float m_log1p(float x) { return vlog1p(x); }
DP_HOST_DEVICE DP_INLINE double m_log1p(double x) { return std::log1p(x); }
DP_HOST_DEVICE DP_INLINE float m_tanh(float x) { return vtanh(x); }
DP_HOST_DEVICE DP_INLINE double m_tanh(double x) { return std::tanh(x); }
DP_HOST_DEVICE DP_INLINE float m_erf(float x) { return verf(x); }
DP_HOST_DEVICE DP_INLINE double m_erf(double x) { return std::erf(x); }

// ---- activations (M is float or double) ----

template <typename M>
DP_HOST_DEVICE DP_INLINE M sigmoid_f(M x) {
  return M(1) / (M(1) + m_exp(-x));
}

template <typename M>
inline constexpr M kSqrt1_2 = M(0.70710678118654752440);  // 1/sqrt(2)
template <typename M>
inline constexpr M kInvSqrt2Pi = M(0.39894228040143267794);  // 1/sqrt(2 pi)
template <typename M>
inline constexpr M kSqrt2OverPi = M(0.79788456080286535588);  // sqrt(2/pi)
template <typename M>
inline constexpr M kGeluC = M(0.044715);

template <typename M>
DP_HOST_DEVICE DP_INLINE M gelu_f(M x) {
  return M(0.5) * x * (M(1) + m_erf(x * kSqrt1_2<M>));
}
template <typename M>
DP_HOST_DEVICE DP_INLINE M gelu_tanh_f(M x) {
  const M inner = kSqrt2OverPi<M> * (x + kGeluC<M> * x * x * x);
  return M(0.5) * x * (M(1) + m_tanh(inner));
}
// d gelu / dx = Phi(x) + x phi(x)
template <typename M>
DP_HOST_DEVICE DP_INLINE M gelu_grad_f(M x) {
  const M cdf = M(0.5) * (M(1) + m_erf(x * kSqrt1_2<M>));
  const M pdf = kInvSqrt2Pi<M> * m_exp(M(-0.5) * x * x);
  return cdf + x * pdf;
}
template <typename M>
DP_HOST_DEVICE DP_INLINE M gelu_tanh_grad_f(M x) {
  const M x2 = x * x;
  const M inner = kSqrt2OverPi<M> * (x + kGeluC<M> * x2 * x);
  const M t = m_tanh(inner);
  const M dinner = kSqrt2OverPi<M> * (M(1) + M(3) * kGeluC<M> * x2);
  return M(0.5) * (M(1) + t) + M(0.5) * x * (M(1) - t * t) * dinner;
}
template <typename M>
DP_HOST_DEVICE DP_INLINE M silu_f(M x) {
  return x / (M(1) + m_exp(-x));
}
template <typename M>
DP_HOST_DEVICE DP_INLINE M silu_grad_f(M x) {
  const M s = sigmoid_f(x);
  return s * (M(1) + x * (M(1) - s));
}
// softplus with beta 1 and threshold 20 (PyTorch's defaults): linear above the threshold.
template <typename M>
DP_HOST_DEVICE DP_INLINE M softplus_f(M x) {
  const M y = m_log1p(m_exp(x));
  return sel(x > M(20), x, y);
}
template <typename M>
DP_HOST_DEVICE DP_INLINE M softplus_grad_f(M x) {
  const M z = m_exp(x);
  const M g = z / (z + M(1));
  return sel(x > M(20), M(1), g);
}

}  // namespace dp::backend
