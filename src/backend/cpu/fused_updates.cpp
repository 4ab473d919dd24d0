// The loops are instantiated per combination of flags so every branch is resolved outside the
// loop and the body is straight-line code: the compiler vectorises SGD's; Adam's (which needs a
// square root GCC will not vectorise under -fmath-errno) is written with AVX intrinsics.
// std::fma compiles to one instruction with FMA (-march=native); no other multiply-add is fused
// (fp-contract off below), so the roundings stay PyTorch's.
// In a portable build (backend/cpu/cpu_dispatch.h) the SGD loop is compiled for x86-64, AVX2 and
// AVX-512 and the CPU's best is taken at run time; Adam's AVX path runs when the CPU has AVX2 and
// FMA. Every copy gives the same bits (std::fma is a correctly rounded fma everywhere).
// Floating-point contraction off for this file (GCC contracts a * b + c into an FMA by default in
// C++, even with -std=c++20): every rounding here must be the one PyTorch does, and the FMAs
// PyTorch does are written out. Before the includes, so inlined helpers compile the same way.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif
#include "backend/cpu/fused_updates.h"
#include <cmath>
#include <type_traits>
#include "backend/cpu/cpu_dispatch.h"
#if DP_HAVE_AVX2_PATHS
#define DP_OPTIM_AVX 1
#endif
#if DP_X86_DISPATCH && defined(__GNUC__) && !defined(__clang__)
// adam_elements<LaneAvx<T>> is a default-target function that passes __m256 values; GCC warns
// about their ABI, but it is only ever inlined (adam_loop_avx's flatten), never called.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace dp::backend::cpu::fused {
namespace {

// Calls f(std::integral_constant<bool, b>) so a runtime flag becomes a template argument.
template <typename F>
void with_flag(bool b, F&& f) {
  if (b)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// The type an element is computed in: itself for float/double, float32 for the 16-bit types.
template <typename S>
struct ComputeOf {
  using type = S;
};
template <>
struct ComputeOf<BFloat16> {
  using type = float;
};
template <>
struct ComputeOf<Half> {
  using type = float;
};

// One element at a time: the reference semantics (and the loop tails). S is the stored type, T the
// computed one (load widens, store rounds; both no-ops when S == T).
template <typename T, typename S = T>
struct Lane1 {
  using V = T;
  static constexpr int kWidth = 1;
  static V load(const S* p) { return static_cast<T>(*p); }
  static void store(S* p, V v) { *p = static_cast<S>(v); }
  static V set1(T x) { return x; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  static V sqrt(V x) { return std::sqrt(x); }
  // torch.maximum: NaN if either is NaN.
  static V nan_max(V a, V b) { return a != a ? a : (a > b ? a : b); }
};

#ifdef DP_OPTIM_AVX
// 8 floats / 4 doubles per instruction. Spelled out because GCC does not vectorise std::sqrt
// (it may set errno) and this build keeps -fmath-errno; the instructions are the same IEEE
// operations as Lane1's, so both paths give identical bits. (+, -, *, / on __m256 are GCC's
// element-wise vector operators.)
template <typename T>
struct LaneAvx;
template <>
struct LaneAvx<float> {
  using V = __m256;
  static constexpr int kWidth = 8;
  DP_TARGET_AVX2 static V load(const float* p) { return _mm256_loadu_ps(p); }
  DP_TARGET_AVX2 static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  DP_TARGET_AVX2 static V set1(float x) { return _mm256_set1_ps(x); }
  DP_TARGET_AVX2 static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  DP_TARGET_AVX2 static V sqrt(V x) { return _mm256_sqrt_ps(x); }
  // max_ps(a, b) gives b when either is NaN: right for b NaN, so only a NaN needs patching in.
  DP_TARGET_AVX2 static V nan_max(V a, V b) { return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
};
template <>
struct LaneAvx<double> {
  using V = __m256d;
  static constexpr int kWidth = 4;
  DP_TARGET_AVX2 static V load(const double* p) { return _mm256_loadu_pd(p); }
  DP_TARGET_AVX2 static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  DP_TARGET_AVX2 static V set1(double x) { return _mm256_set1_pd(x); }
  DP_TARGET_AVX2 static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  DP_TARGET_AVX2 static V sqrt(V x) { return _mm256_sqrt_pd(x); }
  DP_TARGET_AVX2 static V nan_max(V a, V b) { return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }
};
#endif

// d_p = ±grad; d_p = d_p.add(param, alpha=wd); buf = clone(d_p) | buf.mul_(m).add_(d_p, alpha=1-damp);
// d_p = d_p.add(buf, alpha=m) | buf; param.add_(d_p, alpha=-lr).
template <typename S, bool kMaximize, bool kWeightDecay, int kMomentum /*0 none, 1 first, 2 running*/, bool kNesterov>
DP_TARGET_CLONES void sgd_loop(S* __restrict param, const S* __restrict grad, S* __restrict buf, int64_t n, const SgdScalars& s) {
  using T = typename ComputeOf<S>::type;
  const T wd = static_cast<T>(s.weight_decay);
  const T momentum = static_cast<T>(s.momentum);
  const T one_minus_dampening = static_cast<T>(1.0 - s.dampening);
  const T neg_lr = static_cast<T>(-s.lr);
  for (int64_t i = 0; i < n; ++i) {
    const T p = static_cast<T>(param[i]);
    const T g = static_cast<T>(grad[i]);
    T d = kMaximize ? -g : g;
    if constexpr (kWeightDecay) d = std::fma(p, wd, d);
    if constexpr (kMomentum != 0) {
      const T b = kMomentum == 1 ? d : std::fma(d, one_minus_dampening, static_cast<T>(buf[i]) * momentum);
      buf[i] = static_cast<S>(b);
      d = kNesterov ? std::fma(b, momentum, d) : b;
    }
    param[i] = static_cast<S>(std::fma(d, neg_lr, p));
  }
}

template <typename T>
void sgd_dispatch(T* param, const T* grad, T* buf, bool buffer_initialized, int64_t n, const SgdScalars& s) {
  const int mode = s.momentum == 0 ? 0 : (buffer_initialized ? 2 : 1);
  with_flag(s.maximize, [&](auto mx) {
    with_flag(s.weight_decay != 0, [&](auto wd) {
      with_flag(s.nesterov && mode != 0, [&](auto nest) {
        constexpr bool M = std::decay_t<decltype(mx)>::value, W = std::decay_t<decltype(wd)>::value, N = std::decay_t<decltype(nest)>::value;
        if (mode == 0) {
          if constexpr (!N) sgd_loop<T, M, W, 0, false>(param, grad, buf, n, s);
        } else if (mode == 1) {
          sgd_loop<T, M, W, 1, N>(param, grad, buf, n, s);
        } else {
          sgd_loop<T, M, W, 2, N>(param, grad, buf, n, s);
        }
      });
    });
  });
}

// grad = ±grad; (Adam) grad = grad.add(param, alpha=wd) | (AdamW) param.mul_(1 - lr*wd);
// exp_avg.mul_(b1).add_(grad, alpha=1-b1); exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2);
// [amsgrad] max_sq = maximum(max_sq, exp_avg_sq);
// denom = (sq.sqrt() / sqrt(bc2)).add_(eps); param.addcdiv_(exp_avg, denom, value=-lr/bc1).
struct AdamConsts {
  double neg_step_size, bias_correction2_sqrt, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, wd, decay;
};

// Elements [i, i + L::kWidth), stored as S, computed as T (L's lanes: S == T except in Lane1).
template <typename L, typename S, bool kMaximize, bool kL2, bool kDecoupled, bool kAmsgrad>
inline void adam_elements(int64_t i, S* __restrict param, const S* __restrict grad, S* __restrict exp_avg, S* __restrict exp_avg_sq,
                          S* __restrict max_exp_avg_sq, const AdamConsts& c) {
  using V = typename L::V;
  using T = typename ComputeOf<S>::type;
  const V neg_step_size = L::set1(static_cast<T>(c.neg_step_size));
  const V bias_correction2_sqrt = L::set1(static_cast<T>(c.bias_correction2_sqrt));
  V p = L::load(param + i);
  V g = L::load(grad + i);
  if constexpr (kMaximize) g = -g;
  if constexpr (kDecoupled) p = p * L::set1(static_cast<T>(c.decay));
  if constexpr (kL2) g = L::fma(p, L::set1(static_cast<T>(c.wd)), g);
  const V m = L::fma(g, L::set1(static_cast<T>(c.one_minus_beta1)), L::load(exp_avg + i) * L::set1(static_cast<T>(c.beta1)));
  const V v = L::fma(L::set1(static_cast<T>(c.one_minus_beta2)) * g, g, L::load(exp_avg_sq + i) * L::set1(static_cast<T>(c.beta2)));
  L::store(exp_avg + i, m);
  L::store(exp_avg_sq + i, v);
  V v_used = v;
  if constexpr (kAmsgrad) {
    v_used = L::nan_max(L::load(max_exp_avg_sq + i), v);
    L::store(max_exp_avg_sq + i, v_used);
  }
  const V denom = L::sqrt(v_used) / bias_correction2_sqrt + L::set1(static_cast<T>(c.eps));
  L::store(param + i, p + neg_step_size * m / denom);
}

#ifdef DP_OPTIM_AVX
// adam_loop's vector part (S float or double): whole vectors from 0; returns where it stopped.
// Everything it calls is inlined into it (flatten), so all of it is compiled for AVX2 + FMA.
template <typename S, bool kMaximize, bool kL2, bool kDecoupled, bool kAmsgrad>
DP_TARGET_AVX2 __attribute__((flatten)) int64_t adam_loop_avx(S* param, const S* grad, S* exp_avg, S* exp_avg_sq, S* max_exp_avg_sq, int64_t n,
                                                              const AdamConsts& c) {
  using LV = LaneAvx<S>;
  int64_t i = 0;
  for (; i + LV::kWidth <= n; i += LV::kWidth)
    adam_elements<LV, S, kMaximize, kL2, kDecoupled, kAmsgrad>(i, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c);
  return i;
}
#endif

// grad = ±grad; (Adam) grad = grad.add(param, alpha=wd) | (AdamW) param.mul_(1 - lr*wd);
// exp_avg.mul_(b1).add_(grad, alpha=1-b1); exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2);
// [amsgrad] max_sq = maximum(max_sq, exp_avg_sq);
// denom = (sq.sqrt() / sqrt(bc2)).add_(eps); param.addcdiv_(exp_avg, denom, value=-lr/bc1).
// The scalars are computed in double and cast to T once, as ATen casts Python scalars.
template <typename S, bool kMaximize, bool kL2, bool kDecoupled, bool kAmsgrad>
void adam_loop(S* param, const S* grad, S* exp_avg, S* exp_avg_sq, S* max_exp_avg_sq, int64_t n, const AdamScalars& s) {
  using T = typename ComputeOf<S>::type;
  const double bias_correction1 = 1 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1 - std::pow(s.beta2, static_cast<double>(s.step));
  AdamConsts c;
  c.neg_step_size = -(s.lr / bias_correction1);
  c.bias_correction2_sqrt = std::sqrt(bias_correction2);
  c.beta1 = s.beta1;
  c.one_minus_beta1 = 1 - s.beta1;
  c.beta2 = s.beta2;
  c.one_minus_beta2 = 1 - s.beta2;
  c.eps = s.eps;
  c.wd = s.weight_decay;
  c.decay = 1 - s.lr * s.weight_decay;
  int64_t i = 0;
#ifdef DP_OPTIM_AVX
  // The 16-bit types take the scalar path (their widening and rounding have no AVX2 instructions).
  if constexpr (std::is_same_v<S, T>) {
    if (backend::cpu::cpu_has_avx2_fma())
      i = adam_loop_avx<S, kMaximize, kL2, kDecoupled, kAmsgrad>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, c);
  }
#endif
  for (; i < n; ++i) adam_elements<Lane1<T, S>, S, kMaximize, kL2, kDecoupled, kAmsgrad>(i, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c);
}

template <typename T>
void adam_dispatch(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq, int64_t n, const AdamScalars& s) {
  // AdamW multiplies by 1 - lr*wd even when that is 1 (exact, so skipping it changes nothing).
  const bool decoupled = s.decoupled_weight_decay && s.lr * s.weight_decay != 0;
  const bool l2 = !s.decoupled_weight_decay && s.weight_decay != 0;
  with_flag(s.maximize, [&](auto mx) {
    with_flag(l2, [&](auto l2c) {
      with_flag(decoupled, [&](auto dec) {
        with_flag(s.amsgrad, [&](auto ams) {
          constexpr bool L = std::decay_t<decltype(l2c)>::value, D = std::decay_t<decltype(dec)>::value;
          if constexpr (!(L && D))
            adam_loop<T, std::decay_t<decltype(mx)>::value, L, D, std::decay_t<decltype(ams)>::value>(param, grad, exp_avg, exp_avg_sq,
                                                                                                      max_exp_avg_sq, n, s);
        });
      });
    });
  });
}

}  // namespace

void sgd_update(float* param, const float* grad, float* momentum_buffer, bool buffer_initialized, int64_t n, const SgdScalars& s) {
  sgd_dispatch(param, grad, momentum_buffer, buffer_initialized, n, s);
}
void sgd_update(double* param, const double* grad, double* momentum_buffer, bool buffer_initialized, int64_t n, const SgdScalars& s) {
  sgd_dispatch(param, grad, momentum_buffer, buffer_initialized, n, s);
}
void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t n, const AdamScalars& s) {
  adam_dispatch(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, s);
}
void adam_update(double* param, const double* grad, double* exp_avg, double* exp_avg_sq, double* max_exp_avg_sq, int64_t n, const AdamScalars& s) {
  adam_dispatch(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, s);
}
void sgd_update(BFloat16* param, const BFloat16* grad, BFloat16* momentum_buffer, bool buffer_initialized, int64_t n, const SgdScalars& s) {
  sgd_dispatch(param, grad, momentum_buffer, buffer_initialized, n, s);
}
void sgd_update(Half* param, const Half* grad, Half* momentum_buffer, bool buffer_initialized, int64_t n, const SgdScalars& s) {
  sgd_dispatch(param, grad, momentum_buffer, buffer_initialized, n, s);
}
void adam_update(BFloat16* param, const BFloat16* grad, BFloat16* exp_avg, BFloat16* exp_avg_sq, BFloat16* max_exp_avg_sq, int64_t n,
                 const AdamScalars& s) {
  adam_dispatch(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, s);
}
void adam_update(Half* param, const Half* grad, Half* exp_avg, Half* exp_avg_sq, Half* max_exp_avg_sq, int64_t n, const AdamScalars& s) {
  adam_dispatch(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, s);
}

}  // namespace dp::backend::cpu::fused
