#pragma once
// Inner loops of the element-wise ops, on top of ElementwiseIter.
//
//  - launch<Out, In...>(out, f, in...): out[i] = f(in[i]...) with the inputs broadcast to out's
//    shape. Every operand must already have the element type given (the ops convert first).
//  - When out and every input are contiguous with out's element count (same shape), the loop runs
//    straight over typed pointers without building an iterator (the common case, and the cheap one
//    for tiny tensors).
//  - Otherwise ElementwiseIter coalesces dims and hands over rows; a row whose inputs are either
//    dense or broadcast (stride 0) gets a vectorisable loop with the broadcast value held in a
//    register (row / column broadcasting, tensor op 0-dim tensor); anything else a strided loop.
//
//  - A dense loop over many elements (at least blas::kRangeMin) issued by a host thread set to
//    several threads is cut into pieces that those threads take one at a time
//    (blas::parallel_range): these loops are memory-bound, and one core does not saturate memory
//    bandwidth. Each element is computed as in one loop, so results do not depend on the threads.
//
// Aliasing: out may be exactly one of the inputs (in-place ops); the ops never pass an input that
// overlaps out partially (they copy it first), so the dense loops tell the compiler to ignore
// assumed dependences (ivdep) and vectorise without runtime alias checks.
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include "backend/cpu/blas.h"
#include "backend/cpu/cpu_dispatch.h"
#include "backend/cpu/loops.h"

namespace dp::backend::cpu {

// The loops are functions of their own (noinline) into which the element functor and the math it
// calls are inlined whatever their size (flatten): so compiled, every loop whose functor allows it
// vectorises (inlined into a large caller, or calling a functor left out of line, it stayed scalar).
// In a portable build each loop is also compiled for AVX2 and AVX-512 and the CPU's best is taken
// at run time (DP_TARGET_CLONES, backend/cpu/cpu_dispatch.h).
#if defined(__GNUC__) && !defined(__CUDACC__)
#define DP_FLATTEN __attribute__((flatten, noinline)) DP_TARGET_CLONES
#else
#define DP_FLATTEN
#endif

template <typename Out, typename F, typename... In>
DP_FLATTEN void dense_loop(Out* out, int64_t n, const F& fn, const In*... in) {
  // A local copy: the captured values (a scalar operand, alpha) then live in registers; read
  // through the reference they might alias the output and would be reloaded per element, which
  // also blocks vectorisation.
  const F f = fn;
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]...);
}

// One row of n elements; s[k] is operand k's stride in bytes.
template <typename Out, typename... In, typename F>
DP_FLATTEN void row_loop(char** p, const int64_t* s, int64_t n, const F& fn) {
  const F f = fn;  // see dense_loop
  constexpr size_t N = sizeof...(In);
  if (s[0] == static_cast<int64_t>(sizeof(Out))) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    bool dense = true;
    {
      int k = 1;
      ((dense = dense && s[k] == static_cast<int64_t>(sizeof(In)), ++k), ...);
    }
    if (dense) {
      [&]<size_t... I>(std::index_sequence<I...>) { dense_loop(out, n, f, reinterpret_cast<const In*>(p[I + 1])...); }
      (std::make_index_sequence<N>{});
      return;
    }
    if constexpr (N == 1) {
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      if (s[1] == 0) {
        const Out v = f(*reinterpret_cast<const A*>(p[1]));
        for (int64_t i = 0; i < n; ++i) out[i] = v;
        return;
      }
    } else if constexpr (N == 2) {
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      using B = std::tuple_element_t<1, std::tuple<In...>>;
      if (s[1] == static_cast<int64_t>(sizeof(A)) && s[2] == 0) {
        const B b = *reinterpret_cast<const B*>(p[2]);
        dense_loop(
            out, n, [&f, b](A a) { return f(a, b); }, reinterpret_cast<const A*>(p[1]));
        return;
      }
      if (s[1] == 0 && s[2] == static_cast<int64_t>(sizeof(B))) {
        const A a = *reinterpret_cast<const A*>(p[1]);
        dense_loop(
            out, n, [&f, a](B b) { return f(a, b); }, reinterpret_cast<const B*>(p[2]));
        return;
      }
    } else if constexpr (N == 3) {
      using A = std::tuple_element_t<0, std::tuple<In...>>;
      using B = std::tuple_element_t<1, std::tuple<In...>>;
      using C = std::tuple_element_t<2, std::tuple<In...>>;
      // First input dense, the other two broadcast (e.g. addcmul_ with a per-row value).
      if (s[1] == static_cast<int64_t>(sizeof(A)) && s[2] == 0 && s[3] == 0) {
        const B b = *reinterpret_cast<const B*>(p[2]);
        const C c = *reinterpret_cast<const C*>(p[3]);
        dense_loop(
            out, n, [&f, b, c](A a) { return f(a, b, c); }, reinterpret_cast<const A*>(p[1]));
        return;
      }
    }
  }
  [&]<size_t... I>(std::index_sequence<I...>) {
    char* o = p[0];
    std::array<char*, N> q{p[I + 1]...};
    for (int64_t i = 0; i < n; ++i) {
      *reinterpret_cast<Out*>(o) = f(*reinterpret_cast<const In*>(q[I])...);
      o += s[0];
      ((q[I] += s[I + 1]), ...);
    }
  }
  (std::make_index_sequence<N>{});
}

// out[i] = f(in[i]...), inputs broadcast to out's shape (the caller has checked that they do).
template <typename Out, typename... In, typename F, typename... Ts>
void launch(const Tensor& out, const F& f, const Ts&... in) {
  static_assert(sizeof...(In) == sizeof...(Ts), "launch: one element type per input");
  const int64_t n = out.numel();
  if (n == 0) return;
  if (out.is_contiguous() && ((in.is_contiguous() && in.numel() == n) && ...)) {
    Out* o = static_cast<Out*>(out.data_ptr());
    if (!blas::range_is_parallel(n)) {
      dense_loop(o, n, f, static_cast<const In*>(in.data_ptr())...);
      return;
    }
    blas::parallel_range(n, [&](int64_t b, int64_t e) { dense_loop(o + b, e - b, f, static_cast<const In*>(in.data_ptr()) + b...); });
    return;
  }
  // A large contiguous output whose inputs are each contiguous or a single element (x * a 0-dim
  // tensor, clip_grad_norm_'s in-place scaling): row_loop's broadcast loops, in pieces.
  if (out.is_contiguous() && blas::range_is_parallel(n) && (((in.is_contiguous() && in.numel() == n) || in.numel() == 1) && ...)) {
    char* o = static_cast<char*>(out.data_ptr());
    blas::parallel_range(n, [&](int64_t b, int64_t e) {
      std::array<char*, sizeof...(In) + 1> p{o + b * static_cast<int64_t>(sizeof(Out)),
                                             static_cast<char*>(in.data_ptr()) + (in.numel() == n ? b * static_cast<int64_t>(sizeof(In)) : 0)...};
      const std::array<int64_t, sizeof...(In) + 1> st{static_cast<int64_t>(sizeof(Out)), (in.numel() == n ? static_cast<int64_t>(sizeof(In)) : 0)...};
      row_loop<Out, In...>(p.data(), st.data(), e - b, f);
    });
    return;
  }
  ElementwiseIter it({&out, &in...}, out.sizes());
  it.for_each([&](char** p, const int64_t* s, int64_t m) { row_loop<Out, In...>(p, s, m, f); });
}

}  // namespace dp::backend::cpu

namespace dp::backend::cpu {

// The CPU launcher of the shared kernel templates (backend/elementwise_impl.h). A CUDA
// operand reaching it (a CPU output with a CUDA input) is a device mismatch, never a host read of
// device memory.
[[noreturn]] void throw_cuda_operand_on_cpu(const Tensor& out, const Tensor& in);
struct CpuLaunch {
  template <typename Out, typename... In, typename F, typename... Ts>
  static void run(const Tensor& out, const F& f, const Ts&... in) {
    (((in.device().type == DeviceType::CUDA) ? throw_cuda_operand_on_cpu(out, in) : void()), ...);
    launch<Out, In...>(out, f, in...);
  }
};

}  // namespace dp::backend::cpu
