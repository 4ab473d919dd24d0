#pragma once
// The autocast hook of the listed ops (private to dparallel's sources).
//
// An op on PyTorch's autocast lists starts with
//
//   if (autocast::detail::Cast ac{autocast::detail::Op::linear, {&x, &w, &b}})
//     return ac([&] { return linear(ac[0], ac[1], ac[2]); });
//
// When autocast is on for the arguments' device type and the op has a policy there, `ac` holds
// the arguments cast by that policy and, while it lives, autocast is off for that device type, so
// the op's second entry (and every op it calls) runs on the cast arguments untouched, as
// PyTorch's autocast kernels redispatch below the Autocast key. Otherwise `ac` is false and costs
// one thread-local read. ac(fn) runs the second entry; a DTypeError from it (an op without a
// kernel for the dtype autocast chose) comes back with the cast named, since the caller never
// passed that dtype.
#include <cstdint>
#include <initializer_list>
#include <vector>
#include <exception>
#include <string>
#include "dp/amp/autocast.h"
#include "dp/core/errors.h"
#include "dp/core/tensor.h"

namespace dp::autocast::detail {

enum class Policy : uint8_t {
  None,            // untouched
  LowerPrecision,  // floating inputs to the autocast dtype
  Fp32,            // floating inputs to float32
  Promote,         // floating inputs to the widest floating type among them
  Banned,          // refused (binary_cross_entropy on CUDA, as PyTorch)
};

// dparallel's ops that are on one of PyTorch 1.13's autocast lists (CPU, CUDA or both).
enum class Op : uint8_t {
  linear,
  mm,
  matmul,
  addmm,
  bmm,
  baddbmm,
  conv2d,
  lstm_cell,
  dot,
  mse_loss,
  l1_loss,
  nll_loss,
  cross_entropy,
  binary_cross_entropy,
  binary_cross_entropy_with_logits,
  cat,
  stack,
  exp,
  log,
  pow,
  reciprocal,
  rsqrt,
  softplus,
  layer_norm,
  logsumexp,
  softmax,
  log_softmax,
  sum,
  norm,
};

// The policy of `op` for tensors of `device` (autocast_policy.cpp has the lists).
Policy policy(Op op, DeviceType device);
const char* op_name(Op op);

// Whether autocast is on for any device type on this thread.
bool any_enabled();

class Cast {
 public:
  Cast(Op op, std::initializer_list<const Tensor*> args) {
    if (any_enabled()) apply(op, args);
  }
  Cast(Op op, const std::vector<Tensor>& args) {
    if (any_enabled()) apply(op, args);
  }
  ~Cast();
  Cast(const Cast&) = delete;
  Cast& operator=(const Cast&) = delete;

  explicit operator bool() const { return applied_; }
  const Tensor& operator[](size_t i) const { return cast_[i]; }
  const std::vector<Tensor>& all() const { return cast_; }

  template <typename F>
  auto operator()(F&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const DTypeError&) {
      ::dp::detail::rethrow_with_context(std::current_exception(), note());
    }
  }

 private:
  void apply(Op op, std::initializer_list<const Tensor*> args);
  void apply(Op op, const std::vector<Tensor>& args);
  void apply(Op op, const std::vector<const Tensor*>& args);
  // "under CPU autocast, which cast conv2d's floating arguments to bfloat16"
  std::string note() const;

  bool applied_ = false;
  Op op_ = Op::linear;
  DType to_ = kFloat32;
  DeviceType device_ = DeviceType::CPU;
  std::vector<Tensor> cast_;
};

// Autocast off on both device types for a scope, without entering a region: the autograd engine
// runs every backward function under it, so backward runs in the dtypes forward used.
class Off {
 public:
  Off() : cpu_(is_cpu_enabled()), cuda_(is_enabled()) {
    if (cpu_) set_cpu_enabled(false);
    if (cuda_) set_enabled(false);
  }
  ~Off() {
    if (cpu_) set_cpu_enabled(true);
    if (cuda_) set_enabled(true);
  }
  Off(const Off&) = delete;
  Off& operator=(const Off&) = delete;

 private:
  bool cpu_, cuda_;
};

}  // namespace dp::autocast::detail
