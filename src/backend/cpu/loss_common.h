#pragma once
// Shared by the CPU loss kernels (src/backend/cpu/loss_*.cpp): the dtypes they are compiled for,
// raw pointers of optional tensors, the incoming gradient (backend/loss_kernels.h's LossGrad) as
// the loops take it, a summation with independent double accumulators (so it vectorises and keeps
// float32 sums accurate), and the operand shapes the typed loops are specialised on.
#include <cstdint>
#include <type_traits>
#include "backend/loss_kernels.h"
#include "backend/dispatch.h"

namespace dp::backend::cpu::loss {

// float32 and float64 (the CPU losses' dtypes; the op has refused the others).
template <typename F>
void dispatch_real(DType d, const char* op, F&& f) {
  backend::dispatch_types<float, double>(d, op, std::forward<F>(f));
}

// The input's dtype with the class-index target's: int64 or uint8.
template <typename F>
void dispatch_index(DType x, DType t, const char* op, F&& f) {
  dispatch_real(x, op, [&]<typename T>() {
    if (t == kUInt8)
      f.template operator()<T, uint8_t>();
    else
      f.template operator()<T, int64_t>();
  });
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <typename T>
T* mut_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// The incoming gradient: per-sample values, or one value with the scale and divisor applied.
template <typename T>
struct Incoming {
  const T* per_sample = nullptr;
  T value = T(0);
};

template <typename T>
Incoming<T> incoming(const LossGrad& g) {
  Incoming<T> r;
  if (g.per_sample) {
    r.per_sample = static_cast<const T*>(g.g.data_ptr());
    return r;
  }
  double v = static_cast<double>(static_cast<const T*>(g.g.data_ptr())[0]) * g.scale;
  if (g.divisor.defined()) v /= static_cast<double>(static_cast<const T*>(g.divisor.data_ptr())[0]);
  r.value = static_cast<T>(v);
  return r;
}

// Sum of many values in 16 independent double lanes (pairwise at the end).
struct Accum {
  double lane[16] = {};
  double rest = 0;
  template <typename T>
  void add(const T* v, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int k = 0; k < 16; ++k) lane[k] += static_cast<double>(v[i + k]);
    for (; i < n; ++i) rest += static_cast<double>(v[i]);
  }
  void add1(double v) { rest += v; }
  double total() const {
    double s[16];
    for (int k = 0; k < 16; ++k) s[k] = lane[k];
    for (int k = 0; k < 8; ++k) s[k] += s[k + 8];
    for (int k = 0; k < 4; ++k) s[k] += s[k + 4];
    return (s[0] + s[2]) + (s[1] + s[3]) + rest;
  }
};

// Operand shapes the inner loops are compiled for: one value for every element (a broadcast
// weight, a reduced gradient, or an absent weight as 1) or one value per element.
template <typename T>
struct Val {
  T v;
  T operator[](int64_t) const { return v; }
};
template <typename T>
struct Ptr {
  const T* p;
  T operator[](int64_t j) const { return p[j]; }
};

}  // namespace dp::backend::cpu::loss
