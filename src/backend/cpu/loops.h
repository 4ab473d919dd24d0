#pragma once
// The element-wise iteration engine (a small TensorIterator): operands share one iteration shape
// (inputs broadcast by stride 0), dimensions that are contiguous across every operand are merged,
// and the innermost dimension is handed to a typed loop that the compiler vectorises when every
// operand is contiguous. Element functors are plain callables, so the same functor can be reused
// by the CUDA backend.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>
#include "dp/core/small_vector.h"
#include "dp/core/tensor.h"
#include "backend/copy_kernels.h"
#include "backend/dispatch.h"

namespace dp::backend::cpu {

constexpr int kMaxOperands = 5;

class ElementwiseIter {
 public:
  // operands[0] is the output; inputs are broadcast to `shape` (output's sizes).
  ElementwiseIter(std::initializer_list<const Tensor*> operands, IntArrayRef shape) {
    init(operands.begin(), static_cast<int>(operands.size()), shape);
  }
  ElementwiseIter(const std::vector<const Tensor*>& operands, IntArrayRef shape) { init(operands.data(), static_cast<int>(operands.size()), shape); }
  // Calls f(char** ptrs, const int64_t* inner_strides_bytes, int64_t n) for each run of the
  // innermost dimension, or for several disjoint ranges in parallel when `grain` allows.
  template <typename F>
  void for_each(F&& f) const;
  int64_t numel() const { return numel_; }
  int ntensors() const { return nt_; }

 private:
  void init(const Tensor* const* operands, int n, IntArrayRef shape);
  int nt_;
  int64_t numel_;
  SmallVector<int64_t, 6> shape_;                              // coalesced, innermost last
  std::array<SmallVector<int64_t, 6>, kMaxOperands> strides_;  // bytes, per operand per dim
  std::array<char*, kMaxOperands> base_{};
};

template <typename F>
void ElementwiseIter::for_each(F&& f) const {
  if (numel_ == 0) return;
  const int nd = static_cast<int>(shape_.size());
  std::array<char*, kMaxOperands> ptrs = base_;
  std::array<int64_t, kMaxOperands> inner{};
  for (int k = 0; k < nt_; ++k) inner[k] = nd ? strides_[k][nd - 1] : 0;
  const int64_t n = nd ? shape_[nd - 1] : 1;
  if (nd <= 1) {
    f(ptrs.data(), inner.data(), n);
    return;
  }
  SmallVector<int64_t, 6> idx(nd - 1, 0);
  for (;;) {
    f(ptrs.data(), inner.data(), n);
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < shape_[d]) {
        for (int k = 0; k < nt_; ++k) ptrs[k] += strides_[k][d];
        break;
      }
      for (int k = 0; k < nt_; ++k) ptrs[k] -= strides_[k][d] * (shape_[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// out[i] = f(in0[i], in1[i], ...). All operands must already have the element types given.
// The contiguous case is a plain indexed loop over typed pointers so it vectorises.
template <typename Out, typename... In, typename F>
void cpu_kernel(const ElementwiseIter& it, F f) {
  constexpr int N = sizeof...(In);
  it.for_each([&](char** ptrs, const int64_t* strides, int64_t n) {
    // A local copy: values captured by the functor cannot alias the output, so the compiler keeps
    // them in registers and vectorises the loop.
    const F f_local = f;
    bool contiguous = strides[0] == sizeof(Out);
    {
      int k = 1;
      ((contiguous = contiguous && (strides[k] == sizeof(In) || strides[k] == 0), ++k), ...);
    }
    Out* out = reinterpret_cast<Out*>(ptrs[0]);
    if (contiguous) {
      // Separate paths for stride-0 (broadcast scalar-like) inputs would help further; the
      // generic indexed form below already vectorises the all-contiguous case.
      bool all_dense = true;
      {
        int k = 1;
        ((all_dense = all_dense && strides[k] == sizeof(In), ++k), ...);
      }
      if (all_dense) {
        auto run = [&]<size_t... I>(std::index_sequence<I...>) {
          std::tuple<const In*...> in{reinterpret_cast<const In*>(ptrs[I + 1])...};
          for (int64_t i = 0; i < n; ++i) out[i] = f_local(std::get<I>(in)[i]...);
        };
        run(std::make_index_sequence<N>{});
        return;
      }
    }
    auto run_strided = [&]<size_t... I>(std::index_sequence<I...>) {
      char* o = ptrs[0];
      [[maybe_unused]] std::array<char*, N + 1> p{};  // unused for a 0-input kernel (fill)
      ((p[I + 1] = ptrs[I + 1]), ...);
      for (int64_t i = 0; i < n; ++i) {
        *reinterpret_cast<Out*>(o) = f_local(*reinterpret_cast<const In*>(p[I + 1])...);
        o += strides[0];
        ((p[I + 1] += strides[I + 1]), ...);
      }
    };
    run_strided(std::make_index_sequence<N>{});
  });
}

// The CPU backend's copy and fill (backend/copy_kernels.h, whose backend::copy_kernel and
// backend::fill_kernel pick the backend): host memory only.
CopyKernel copy_kernel;
FillKernel fill_kernel;
// The factories' fills (backend/copy_kernels.h's ArangeKernel, LinspaceKernel).
ArangeKernel arange_kernel;
LinspaceKernel linspace_kernel;

}  // namespace dp::backend::cpu
