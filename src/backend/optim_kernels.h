#pragma once
// The kernel interface of the optimizers' fused updates: one call per (device, dtype) of a param
// group, with every parameter of that group on that device (the CPU backend loops over them:
// src/backend/cpu/optim_updates.cpp; the CUDA backend queues a few multi-tensor launches on the
// device's current stream: src/backend/cuda/optim.cu). The per-element math is PyTorch 1.13's
// foreach=False sequence with its roundings (src/backend/cpu/fused_updates.h).
#include <cstdint>
#include <vector>
#include "backend/dispatch.h"
#include "backend/kernel_stub.h"
#include "dp/core/dtype.h"
#include "dp/core/errors.h"
#include "dp/core/half.h"

namespace dp::backend {

struct SgdScalars {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

struct AdamScalars {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;
  bool decoupled_weight_decay = false;  // AdamW: param *= 1 - lr * weight_decay first
  int64_t step = 1;                     // this update's step number (1 on the first update)
};

// One parameter's memory for an SGD update: contiguous buffers of n elements each, on the call's
// device. momentum_buffer is unused when momentum == 0; when !buffer_initialized it is overwritten
// with the step's direction (PyTorch's first-step clone) instead of being decayed.
struct SgdTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* momentum_buffer = nullptr;
  int64_t n = 0;
  bool buffer_initialized = false;
};

// One parameter's memory for an Adam/AdamW update; max_exp_avg_sq only with amsgrad. `step` is
// this update's step number (1 on the first), per parameter.
struct AdamTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* max_exp_avg_sq = nullptr;
  int64_t n = 0;
  int64_t step = 1;
};

// Calls f(S{}) with S the element type of a parameter dtype the fused updates take (float32,
// float64, bfloat16, float16; Optimizer::add_param_group admits no other); `op` names the
// optimizer in the DTypeError for any other. Both backends' update kernels dispatch through it.
template <typename F>
void with_param_type(DType dtype, const char* op, F&& f) {
  backend::dispatch_types<float, double, BFloat16, Half>(dtype, op, [&]<typename S>() { f(S{}); });
}

// Every tensor of `list` is of `dtype` (float32, float64, float16 or bfloat16) and on device index
// `device` of the call's device type. adam_update ignores s.step (each tensor has its own).
using SgdUpdate = void(DType dtype, int device, const std::vector<SgdTensor>& list, const SgdScalars& s);
using AdamUpdate = void(DType dtype, int device, const std::vector<AdamTensor>& list, const AdamScalars& s);
// Throws when a step whose scalars are host values (Adam's step count and bias corrections) would
// be frozen into a graph being captured on `device` (CUDA graphs); a no-op where nothing captures.
using CheckHostScalarStep = void(int device, const char* optimizer);

DP_DECLARE_KERNEL(sgd_update_kernel, SgdUpdate);
DP_DECLARE_KERNEL(adam_update_kernel, AdamUpdate);
DP_DECLARE_KERNEL(check_host_scalar_step_kernel, CheckHostScalarStep);

}  // namespace dp::backend
