#pragma once
// One definition of the element-wise kernels for both backends. Each kernel is a function template
// over a launcher L (the CPU's CpuLaunch below, CUDA's dp::backend::cuda::detail::CudaLaunch in
// src/backend/cuda/launch.cuh) with
//   L::template run<Out, In...>(out, functor, inputs...)   // out[i] = functor(inputs[i]...)
// and the element math is written as functor structs whose call operators are DP_HOST_DEVICE, so
// the host compiler builds the CPU loops from them (exactly as the lambdas they replace) and nvcc
// builds the CUDA kernels from the same text. The dtype dispatch, the special cases chosen on the
// host (alpha == 1, pow's exact exponents, lerp's nearer end) and the Scalar conversions are shared
// too. src/backend/cpu/elementwise_*.cpp register them on CpuLaunch as the CPU backend of
// backend/elementwise_kernels.h; src/backend/cuda/elementwise_*.cu instantiate them with CudaLaunch.
#include <cmath>
#include <limits>
#include <optional>
#include "dp/core/tensor.h"
#include "backend/elementwise_kernels.h"
#include "backend/elementwise_math.h"

namespace dp::backend::impl {

// ---------------------------------------------------------------- functors

// Binary arithmetic (T is the element type, M its opmath type).
struct BoolAddF {
  bool al;
  DP_HOST_DEVICE DP_INLINE bool operator()(bool x, bool y) const { return x || (al && y); }
};
struct BoolOrConstF {
  bool c;
  DP_HOST_DEVICE DP_INLINE bool operator()(bool x) const { return x || c; }
};
struct BoolAndF {
  DP_HOST_DEVICE DP_INLINE bool operator()(bool x, bool y) const { return x && y; }
};
struct BoolOrF {
  DP_HOST_DEVICE DP_INLINE bool operator()(bool x, bool y) const { return x || y; }
};
struct BoolAndConstF {
  bool c;
  DP_HOST_DEVICE DP_INLINE bool operator()(bool x) const { return x && c; }
};
struct BoolIdF {
  DP_HOST_DEVICE DP_INLINE bool operator()(bool x) const { return x; }
};

template <typename T>
struct AddF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const { return st<T>(wadd(om(x), om(y))); }
};
template <typename T>
struct AddAlphaF {
  opmath_t<T> al;
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const { return st<T>(wadd(om(x), wmul(al, om(y)))); }
};
template <typename T>
struct AddConstF {
  opmath_t<T> c;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(wadd(om(x), c)); }
};
template <typename T>
struct RsubConstF {
  opmath_t<T> c;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(wsub(c, om(x))); }
};
template <typename T>
struct MulF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const { return st<T>(wmul(om(x), om(y))); }
};
template <typename T>
struct MulConstF {
  opmath_t<T> c;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(wmul(om(x), c)); }
};
template <typename T>
struct DivF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const { return st<T>(om(x) / om(y)); }
};
template <typename T>
struct DivConstF {
  opmath_t<T> c;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(om(x) / c); }
};
template <typename T>
struct RdivConstF {
  opmath_t<T> c;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(c / om(x)); }
};
template <typename T>
struct PowF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const {
    if constexpr (is_float_v<T>)
      return st<T>(std::pow(om(x), om(y)));
    else
      return int_pow(x, y);
  }
};
// pow(x, c) with the exponents PyTorch computes without pow (exact squares and cubes, sqrt,
// reciprocals): K selects the form (0: general).
template <typename T, int K>
struct PowConstF {
  opmath_t<T> c;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const {
    using M = opmath_t<T>;
    if constexpr (K == 2)
      return st<T>(om(x) * om(x));
    else if constexpr (K == 3)
      return st<T>(om(x) * om(x) * om(x));
    else if constexpr (K == 1)
      return x;
    else if constexpr (K == 5)
      return st<T>(std::sqrt(om(x)));  // 0.5
    else if constexpr (K == -5)
      return st<T>(M(1) / std::sqrt(om(x)));  // -0.5
    else if constexpr (K == -1)
      return st<T>(M(1) / om(x));
    else if constexpr (K == -2)
      return st<T>(M(1) / (om(x) * om(x)));
    else
      return st<T>(std::pow(om(x), c));
  }
};
template <typename T>
struct IntPowConstF {
  T c;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return int_pow(x, c); }
};
template <typename T>
struct RpowConstF {
  opmath_t<T> c;
  DP_HOST_DEVICE DP_INLINE T operator()(T y) const {
    if constexpr (is_float_v<T>)
      return st<T>(std::pow(c, om(y)));
    else
      return int_pow(c, y);
  }
};
template <typename T>
struct MaximumF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const {
    auto u = om(x), v = om(y);
    if constexpr (is_float_v<T>)
      return st<T>(u != u ? u : (v != v ? v : (u > v ? u : v)));
    else
      return u > v ? x : y;
  }
};
template <typename T>
struct MinimumF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const {
    auto u = om(x), v = om(y);
    if constexpr (is_float_v<T>)
      return st<T>(u != u ? u : (v != v ? v : (u < v ? u : v)));
    else
      return u < v ? x : y;
  }
};
template <typename T, bool IsMax>
struct ExtremumWeightF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const {
    using M = opmath_t<T>;
    if constexpr (IsMax)
      return st<T>(om(x) > om(y) ? M(1) : om(x) == om(y) ? M(0.5) : M(0));
    else
      return st<T>(om(x) < om(y) ? M(1) : om(x) == om(y) ? M(0.5) : M(0));
  }
};
template <typename T>
struct LerpNearF {
  opmath_t<T> w;
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const { return st<T>(om(x) + w * (om(y) - om(x))); }
};
template <typename T>
struct LerpFarF {
  opmath_t<T> w1;
  DP_HOST_DEVICE DP_INLINE T operator()(T x, T y) const { return st<T>(om(y) - (om(y) - om(x)) * w1); }
};
template <typename T>
struct WhereF {
  DP_HOST_DEVICE DP_INLINE T operator()(bool c, T x, T y) const { return c ? x : y; }
};
template <typename T>
struct WhereConstF {
  T v;
  DP_HOST_DEVICE DP_INLINE T operator()(bool c, T x) const { return c ? x : v; }
};
template <typename T>
struct AddcmulF {
  opmath_t<T> v;
  DP_HOST_DEVICE DP_INLINE T operator()(T s, T x, T y) const { return st<T>(wadd(om(s), wmul(v, wmul(om(x), om(y))))); }
};
template <typename T>
struct AddcdivF {
  opmath_t<T> v;
  DP_HOST_DEVICE DP_INLINE T operator()(T s, T x, T y) const { return st<T>(om(s) + v * (om(x) / om(y))); }
};

// Unary.
template <typename T>
struct IdF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return x; }
};
template <typename T>
struct NegF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(wneg(om(x))); }
};
template <typename T>
struct AbsF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else if constexpr (is_float_v<T>)
      return st<T>(std::abs(om(x)));
    else
      return x < 0 ? wneg(x) : x;
  }
};
template <typename T>
struct SignF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const {
    using M = opmath_t<T>;
    return st<T>(M((M(0) < om(x)) - (om(x) < M(0))));
  }
};
template <typename T>
struct SquareF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(wmul(om(x), om(x))); }
};
template <typename T>
struct ReluF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const {
    using M = opmath_t<T>;
    if constexpr (is_float_v<T>)
      return (om(x) > M(0) || om(x) != om(x)) ? x : st<T>(M(0));
    else
      return x > st<T>(0) ? x : st<T>(0);
  }
};

// Floating element functions, computed in M (float for the 16-bit types, else T).
struct ExpF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return m_exp(x);
  }
};
struct LogF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return m_log(x);
  }
};
struct Log1pF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return m_log1p(x);
  }
};
struct SqrtF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return std::sqrt(x);
  }
};
struct RsqrtF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return M(1) / std::sqrt(x);
  }
};
struct SinF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return std::sin(x);
  }
};
struct CosF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return std::cos(x);
  }
};
struct ReciprocalF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return M(1) / x;
  }
};
struct SigmoidF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return sigmoid_f(x);
  }
};
struct TanhF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return m_tanh(x);
  }
};
struct GeluF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return gelu_f(x);
  }
};
// Phi(x), the standard normal CDF: gelu's derivative part (src/ops/activation.cpp).
struct NormalCdfF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return M(0.5) * (M(1) + m_erf(x * kSqrt1_2<M>));
  }
};
struct GeluTanhF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return gelu_tanh_f(x);
  }
};
struct SiluF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return silu_f(x);
  }
};
struct SoftplusF {
  template <typename M>
  DP_HOST_DEVICE static DP_INLINE M f(M x) {
    return softplus_f(x);
  }
};
template <typename T, typename F>
struct FloatingUnaryF {
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(F::template f<opmath_t<T>>(om(x))); }
};

template <typename T>
struct ClampF {
  opmath_t<T> l, h;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const {
    opmath_t<T> r = om(x) < l ? l : om(x);
    return st<T>(h < r ? h : r);
  }
};
template <typename T>
struct ClampMinF {
  opmath_t<T> l;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(om(x) < l ? l : om(x)); }
};
template <typename T>
struct ClampMaxF {
  opmath_t<T> h;
  DP_HOST_DEVICE DP_INLINE T operator()(T x) const { return st<T>(h < om(x) ? h : om(x)); }
};
template <typename T>
struct ClampMaskF {
  opmath_t<T> l, h;
  DP_HOST_DEVICE DP_INLINE bool operator()(T x) const { return om(x) >= l && om(x) <= h; }
};

// Activation backward: out = g * f'(x) (or of the output y).
template <typename T>
struct ReluGradF {
  DP_HOST_DEVICE DP_INLINE T operator()(T d, T y) const { return om(y) > opmath_t<T>(0) ? d : st<T>(opmath_t<T>(0)); }
};
template <typename T>
struct SigmoidGradF {
  DP_HOST_DEVICE DP_INLINE T operator()(T d, T y) const { return st<T>(om(d) * om(y) * (opmath_t<T>(1) - om(y))); }
};
template <typename T>
struct TanhGradF {
  DP_HOST_DEVICE DP_INLINE T operator()(T d, T y) const { return st<T>(om(d) * (opmath_t<T>(1) - om(y) * om(y))); }
};
template <typename T>
struct GeluGradF {
  DP_HOST_DEVICE DP_INLINE T operator()(T d, T x) const { return st<T>(om(d) * gelu_grad_f(om(x))); }
};
template <typename T>
struct GeluTanhGradF {
  DP_HOST_DEVICE DP_INLINE T operator()(T d, T x) const { return st<T>(om(d) * gelu_tanh_grad_f(om(x))); }
};
template <typename T>
struct SiluGradF {
  DP_HOST_DEVICE DP_INLINE T operator()(T d, T x) const { return st<T>(om(d) * silu_grad_f(om(x))); }
};
template <typename T>
struct SoftplusGradF {
  DP_HOST_DEVICE DP_INLINE T operator()(T d, T x) const { return st<T>(om(d) * softplus_grad_f(om(x))); }
};

// Comparisons (computed on the opmath values).
struct EqOp {
  template <typename V>
  DP_HOST_DEVICE static DP_INLINE bool f(V x, V y) {
    return x == y;
  }
};
struct NeOp {
  template <typename V>
  DP_HOST_DEVICE static DP_INLINE bool f(V x, V y) {
    return x != y;
  }
};
struct LtOp {
  template <typename V>
  DP_HOST_DEVICE static DP_INLINE bool f(V x, V y) {
    return x < y;
  }
};
struct LeOp {
  template <typename V>
  DP_HOST_DEVICE static DP_INLINE bool f(V x, V y) {
    return x <= y;
  }
};
struct GtOp {
  template <typename V>
  DP_HOST_DEVICE static DP_INLINE bool f(V x, V y) {
    return x > y;
  }
};
struct GeOp {
  template <typename V>
  DP_HOST_DEVICE static DP_INLINE bool f(V x, V y) {
    return x >= y;
  }
};
template <typename T, typename C>
struct CompareF {
  DP_HOST_DEVICE DP_INLINE bool operator()(T x, T y) const { return C::f(om(x), om(y)); }
};
template <typename T, typename C>
struct CompareConstF {
  opmath_t<T> c;
  DP_HOST_DEVICE DP_INLINE bool operator()(T x) const { return C::f(om(x), c); }
};
template <typename T>
struct LogicalNotF {
  DP_HOST_DEVICE DP_INLINE bool operator()(T x) const { return !convert<bool>(x); }
};

// ---------------------------------------------------------------- kernels

inline bool is_one(const Scalar& s) { return !s.is_bool() && s.to_double() == 1.0; }

template <class L>
void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (out.dtype() == kBool) {
    L::template run<bool, bool, bool>(out, BoolAddF{alpha.to<bool>()}, a, b);
    return;
  }
  dispatch_numeric(out.dtype(), "add", [&]<typename T>() {
    if (is_one(alpha))
      L::template run<T, T, T>(out, AddF<T>{}, a, b);
    else
      L::template run<T, T, T>(out, AddAlphaF<T>{om(scalar_to<T>(alpha))}, a, b);
  });
}

template <class L>
void add_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s, const Scalar& alpha) {
  if (out.dtype() == kBool) {
    L::template run<bool, bool>(out, BoolOrConstF{alpha.to<bool>() && s.to<bool>()}, a);
    return;
  }
  dispatch_numeric(out.dtype(), "add",
                   [&]<typename T>() { L::template run<T, T>(out, AddConstF<T>{wmul(om(scalar_to<T>(alpha)), om(scalar_to<T>(s)))}, a); });
}

template <class L>
void rsub_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) {
  dispatch_numeric(out.dtype(), "rsub", [&]<typename T>() { L::template run<T, T>(out, RsubConstF<T>{om(scalar_to<T>(s))}, a); });
}

template <class L>
void mul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kBool) {
    L::template run<bool, bool, bool>(out, BoolAndF{}, a, b);
    return;
  }
  dispatch_numeric(out.dtype(), "mul", [&]<typename T>() { L::template run<T, T, T>(out, MulF<T>{}, a, b); });
}

template <class L>
void mul_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) {
  if (out.dtype() == kBool) {
    L::template run<bool, bool>(out, BoolAndConstF{s.to<bool>()}, a);
    return;
  }
  dispatch_numeric(out.dtype(), "mul", [&]<typename T>() { L::template run<T, T>(out, MulConstF<T>{om(scalar_to<T>(s))}, a); });
}

template <class L>
void div_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_floating(out.dtype(), "div", [&]<typename T>() { L::template run<T, T, T>(out, DivF<T>{}, a, b); });
}

template <class L>
void div_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s) {
  dispatch_floating(out.dtype(), "div", [&]<typename T>() { L::template run<T, T>(out, DivConstF<T>{om(scalar_to<T>(s))}, a); });
}

template <class L>
void rdiv_scalar_kernel(const Tensor& out, const Scalar& s, const Tensor& a) {
  dispatch_floating(out.dtype(), "div", [&]<typename T>() { L::template run<T, T>(out, RdivConstF<T>{om(scalar_to<T>(s))}, a); });
}

template <class L>
void pow_kernel(const Tensor& out, const Tensor& a, const Tensor& e) {
  dispatch_numeric(out.dtype(), "pow", [&]<typename T>() { L::template run<T, T, T>(out, PowF<T>{}, a, e); });
}

template <class L>
void pow_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& e) {
  dispatch_numeric(out.dtype(), "pow", [&]<typename T>() {
    if constexpr (is_float_v<T>) {
      const double d = e.to_double();
      const opmath_t<T> c = om(scalar_to<T>(e));
      if (d == 2.0)
        L::template run<T, T>(out, PowConstF<T, 2>{c}, a);
      else if (d == 3.0)
        L::template run<T, T>(out, PowConstF<T, 3>{c}, a);
      else if (d == 1.0)
        L::template run<T, T>(out, PowConstF<T, 1>{c}, a);
      else if (d == 0.5)
        L::template run<T, T>(out, PowConstF<T, 5>{c}, a);
      else if (d == -0.5)
        L::template run<T, T>(out, PowConstF<T, -5>{c}, a);
      else if (d == -1.0)
        L::template run<T, T>(out, PowConstF<T, -1>{c}, a);
      else if (d == -2.0)
        L::template run<T, T>(out, PowConstF<T, -2>{c}, a);
      else
        L::template run<T, T>(out, PowConstF<T, 0>{c}, a);
    } else {
      DP_CHECK(e.to_int() >= 0, ValueError, "pow: Integers to negative integer powers are not allowed.");
      L::template run<T, T>(out, IntPowConstF<T>{scalar_to<T>(e)}, a);
    }
  });
}

template <class L>
void rpow_scalar_kernel(const Tensor& out, const Scalar& base, const Tensor& e) {
  dispatch_numeric(out.dtype(), "pow", [&]<typename T>() { L::template run<T, T>(out, RpowConstF<T>{om(scalar_to<T>(base))}, e); });
}

template <class L>
void maximum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kBool) {
    L::template run<bool, bool, bool>(out, BoolOrF{}, a, b);
    return;
  }
  dispatch_numeric(out.dtype(), "maximum", [&]<typename T>() { L::template run<T, T, T>(out, MaximumF<T>{}, a, b); });
}

template <class L>
void minimum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kBool) {
    L::template run<bool, bool, bool>(out, BoolAndF{}, a, b);
    return;
  }
  dispatch_numeric(out.dtype(), "minimum", [&]<typename T>() { L::template run<T, T, T>(out, MinimumF<T>{}, a, b); });
}

template <class L>
void extremum_weight_kernel(const Tensor& out, const Tensor& a, const Tensor& b, bool is_max) {
  dispatch_floating(out.dtype(), "maximum_backward", [&]<typename T>() {
    if (is_max)
      L::template run<T, T, T>(out, ExtremumWeightF<T, true>{}, a, b);
    else
      L::template run<T, T, T>(out, ExtremumWeightF<T, false>{}, a, b);
  });
}

template <class L>
void lerp_kernel(const Tensor& out, const Tensor& a, const Tensor& end, const Scalar& weight) {
  dispatch_floating(out.dtype(), "lerp", [&]<typename T>() {
    using M = opmath_t<T>;
    const M w = om(scalar_to<T>(weight));
    // PyTorch's formula: from the nearer end, so lerp(a, b, 1) == b exactly.
    if (std::abs(w) < M(0.5))
      L::template run<T, T, T>(out, LerpNearF<T>{w}, a, end);
    else
      L::template run<T, T, T>(out, LerpFarF<T>{M(1) - w}, a, end);
  });
}

template <class L>
void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(out.dtype(), "where", [&]<typename T>() { L::template run<T, bool, T, T>(out, WhereF<T>{}, cond, a, b); });
}

template <class L>
void where_scalar_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Scalar& b) {
  dispatch_all(out.dtype(), "where", [&]<typename T>() { L::template run<T, bool, T>(out, WhereConstF<T>{scalar_to<T>(b)}, cond, a); });
}

template <class L>
void addcmul_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  dispatch_numeric(out.dtype(), "addcmul_",
                   [&]<typename T>() { L::template run<T, T, T, T>(out, AddcmulF<T>{om(scalar_to<T>(value))}, self, a, b); });
}

template <class L>
void addcdiv_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value) {
  dispatch_floating(out.dtype(), "addcdiv_",
                    [&]<typename T>() { L::template run<T, T, T, T>(out, AddcdivF<T>{om(scalar_to<T>(value))}, self, a, b); });
}

template <class L, typename F>
void floating_unary(const Tensor& out, const Tensor& a, const char* name) {
  dispatch_floating(out.dtype(), name, [&]<typename T>() { L::template run<T, T>(out, FloatingUnaryF<T, F>{}, a); });
}

template <class L>
void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& a) {
  switch (op) {
    case UnaryOp::Neg:
      dispatch_numeric(out.dtype(), "neg", [&]<typename T>() { L::template run<T, T>(out, NegF<T>{}, a); });
      return;
    case UnaryOp::Abs:
      dispatch_numeric(out.dtype(), "abs", [&]<typename T>() { L::template run<T, T>(out, AbsF<T>{}, a); });
      return;
    case UnaryOp::Sign:
      if (out.dtype() == kBool) {
        L::template run<bool, bool>(out, BoolIdF{}, a);
        return;
      }
      dispatch_numeric(out.dtype(), "sign", [&]<typename T>() { L::template run<T, T>(out, SignF<T>{}, a); });
      return;
    case UnaryOp::Square:
      dispatch_numeric(out.dtype(), "square", [&]<typename T>() { L::template run<T, T>(out, SquareF<T>{}, a); });
      return;
    case UnaryOp::Relu:
      dispatch_numeric(out.dtype(), "relu", [&]<typename T>() { L::template run<T, T>(out, ReluF<T>{}, a); });
      return;
    case UnaryOp::Exp:
      floating_unary<L, ExpF>(out, a, "exp");
      return;
    case UnaryOp::Log:
      floating_unary<L, LogF>(out, a, "log");
      return;
    case UnaryOp::Log1p:
      floating_unary<L, Log1pF>(out, a, "log1p");
      return;
    case UnaryOp::Sqrt:
      floating_unary<L, SqrtF>(out, a, "sqrt");
      return;
    case UnaryOp::Rsqrt:
      floating_unary<L, RsqrtF>(out, a, "rsqrt");
      return;
    case UnaryOp::Sin:
      floating_unary<L, SinF>(out, a, "sin");
      return;
    case UnaryOp::Cos:
      floating_unary<L, CosF>(out, a, "cos");
      return;
    case UnaryOp::Reciprocal:
      floating_unary<L, ReciprocalF>(out, a, "reciprocal");
      return;
    case UnaryOp::Sigmoid:
      floating_unary<L, SigmoidF>(out, a, "sigmoid");
      return;
    case UnaryOp::Tanh:
      floating_unary<L, TanhF>(out, a, "tanh");
      return;
    case UnaryOp::Gelu:
      floating_unary<L, GeluF>(out, a, "gelu");
      return;
    case UnaryOp::GeluTanh:
      floating_unary<L, GeluTanhF>(out, a, "gelu");
      return;
    case UnaryOp::NormalCdf:
      floating_unary<L, NormalCdfF>(out, a, "gelu_backward");
      return;
    case UnaryOp::Silu:
      floating_unary<L, SiluF>(out, a, "silu");
      return;
    case UnaryOp::Softplus:
      floating_unary<L, SoftplusF>(out, a, "softplus");
      return;
  }
}

template <class L>
void clamp_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  dispatch_numeric(out.dtype(), "clamp", [&]<typename T>() {
    // NaN compares false both ways, so it passes through unchanged.
    if (lo && hi)
      L::template run<T, T>(out, ClampF<T>{om(scalar_to<T>(*lo)), om(scalar_to<T>(*hi))}, a);
    else if (lo)
      L::template run<T, T>(out, ClampMinF<T>{om(scalar_to<T>(*lo))}, a);
    else
      L::template run<T, T>(out, ClampMaxF<T>{om(scalar_to<T>(*hi))}, a);
  });
}

template <class L>
void clamp_mask_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  dispatch_floating(a.dtype(), "clamp_backward", [&]<typename T>() {
    using M = opmath_t<T>;
    const M l = lo ? M(lo->to_double()) : -std::numeric_limits<M>::infinity();
    const M h = hi ? M(hi->to_double()) : std::numeric_limits<M>::infinity();
    L::template run<bool, T>(out, ClampMaskF<T>{l, h}, a);
  });
}

template <class L>
void activation_backward_kernel(ActGrad op, const Tensor& out, const Tensor& g, const Tensor& xy) {
  dispatch_floating(out.dtype(), "activation_backward", [&]<typename T>() {
    switch (op) {
      case ActGrad::ReluFromOut:
        L::template run<T, T, T>(out, ReluGradF<T>{}, g, xy);
        return;
      case ActGrad::SigmoidFromOut:
        L::template run<T, T, T>(out, SigmoidGradF<T>{}, g, xy);
        return;
      case ActGrad::TanhFromOut:
        L::template run<T, T, T>(out, TanhGradF<T>{}, g, xy);
        return;
      case ActGrad::Gelu:
        L::template run<T, T, T>(out, GeluGradF<T>{}, g, xy);
        return;
      case ActGrad::GeluTanh:
        L::template run<T, T, T>(out, GeluTanhGradF<T>{}, g, xy);
        return;
      case ActGrad::Silu:
        L::template run<T, T, T>(out, SiluGradF<T>{}, g, xy);
        return;
      case ActGrad::Softplus:
        L::template run<T, T, T>(out, SoftplusGradF<T>{}, g, xy);
        return;
    }
  });
}

template <class L, typename C>
void compare_as(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_all(a.dtype(), "compare", [&]<typename T>() { L::template run<bool, T, T>(out, CompareF<T, C>{}, a, b); });
}
template <class L, typename C>
void compare_scalar_as(const Tensor& out, const Tensor& a, const Scalar& s) {
  dispatch_all(a.dtype(), "compare", [&]<typename T>() { L::template run<bool, T>(out, CompareConstF<T, C>{om(scalar_to<T>(s))}, a); });
}

template <class L>
void compare_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (op) {
    case CmpOp::Eq:
      compare_as<L, EqOp>(out, a, b);
      return;
    case CmpOp::Ne:
      compare_as<L, NeOp>(out, a, b);
      return;
    case CmpOp::Lt:
      compare_as<L, LtOp>(out, a, b);
      return;
    case CmpOp::Le:
      compare_as<L, LeOp>(out, a, b);
      return;
    case CmpOp::Gt:
      compare_as<L, GtOp>(out, a, b);
      return;
    case CmpOp::Ge:
      compare_as<L, GeOp>(out, a, b);
      return;
  }
}

template <class L>
void compare_scalar_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Scalar& s) {
  switch (op) {
    case CmpOp::Eq:
      compare_scalar_as<L, EqOp>(out, a, s);
      return;
    case CmpOp::Ne:
      compare_scalar_as<L, NeOp>(out, a, s);
      return;
    case CmpOp::Lt:
      compare_scalar_as<L, LtOp>(out, a, s);
      return;
    case CmpOp::Le:
      compare_scalar_as<L, LeOp>(out, a, s);
      return;
    case CmpOp::Gt:
      compare_scalar_as<L, GtOp>(out, a, s);
      return;
    case CmpOp::Ge:
      compare_scalar_as<L, GeOp>(out, a, s);
      return;
  }
}

template <class L>
void logical_not_kernel(const Tensor& out, const Tensor& a) {
  dispatch_all(a.dtype(), "logical_not", [&]<typename T>() { L::template run<bool, T>(out, LogicalNotF<T>{}, a); });
}

}  // namespace dp::backend::impl
