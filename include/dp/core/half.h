#pragma once
// 16-bit floating types stored as raw bits. Arithmetic converts to float, so every element functor
// written for float works for them unchanged (the result is rounded back on store).
#include <cstdint>
#include <cstring>
#include "dp/core/macros.h"

namespace dp {

namespace detail {
DP_HOST_DEVICE inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
DP_HOST_DEVICE inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  DP_HOST_DEVICE BFloat16(float f) {  // round to nearest even; NaN stays NaN
    uint32_t u = detail::f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      x = 0x7fc0;
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    x = static_cast<uint16_t>(u >> 16);
  }
  DP_HOST_DEVICE operator float() const { return detail::bits_f32(static_cast<uint32_t>(x) << 16); }
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 r;
    r.x = b;
    return r;
  }
};

struct Half {
  uint16_t x = 0;
  Half() = default;
  DP_HOST_DEVICE Half(float f) {
    uint32_t u = detail::f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) {
      x = static_cast<uint16_t>(sign | 0x7e00u);
      return;
    }  // NaN
    if (absu >= 0x477ff000u) {
      x = static_cast<uint16_t>(sign | 0x7c00u);
      return;
    }                                           // overflow -> inf
    if (absu < 0x38800000u) {                   // subnormal half (or zero): scale via float addition trick
      float a = detail::bits_f32(absu) + 0.5f;  // 0.5 = 2^-1; half subnormal step is 2^-24
      x = static_cast<uint16_t>(sign | (detail::f32_bits(a) - 0x3f000000u));
      return;
    }
    uint32_t mant_odd = (absu >> 13) & 1u;
    absu += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
    x = static_cast<uint16_t>(sign | (absu >> 13));
  }
  DP_HOST_DEVICE operator float() const {
    uint32_t sign = (static_cast<uint32_t>(x) & 0x8000u) << 16;
    uint32_t exp = (x >> 10) & 0x1fu, mant = x & 0x3ffu;
    if (exp == 0) {                                                  // zero or subnormal
      float f = static_cast<float>(mant) * 5.9604644775390625e-08f;  // 2^-24
      return detail::bits_f32(detail::f32_bits(f) | sign);
    }
    if (exp == 31) return detail::bits_f32(sign | 0x7f800000u | (mant << 13));
    return detail::bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
  }
  static Half from_bits(uint16_t b) {
    Half r;
    r.x = b;
    return r;
  }
};

}  // namespace dp
