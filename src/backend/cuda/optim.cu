// Multi-tensor fused SGD and Adam/AdamW updates on CUDA (see cuda/optim.h).
//
// Roundings: nvcc contracts a * b + c into an FMA by default (--fmad=true), which would change
// results against the CPU kernels (backend/cpu/fused_updates.cpp, which match PyTorch bit for
// bit). Every operation is therefore written with the round-to-nearest intrinsics, which are never
// contracted, and the FMAs PyTorch does are explicit: the CUDA update equals the CPU one bit for
// bit (division and square root are IEEE-correct in both).
//
// float16/bfloat16 parameters (state in the same dtype) are computed in float32 and each stored
// value is rounded once, as the CPU kernels do for them (with the same operations, so again the
// same bits).
#include <cuda_runtime.h>
#include <cmath>
#include "backend/cuda/optim.h"
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"

namespace dp::backend::cuda::optim {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ double fma_rn(double a, double b, double c) { return __fma_rn(a, b, c); }
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

// torch.maximum: NaN if either is NaN.
template <typename T>
__device__ __forceinline__ T nan_max(T a, T b) {
  return a != a ? a : (a > b ? a : b);
}

// The block's tensor and chunk: block_start[k] is tensor k's first block (block_start[count] the
// total). Empty tensors have no blocks and are stepped over.
struct BlockSlot {
  int k;
  int64_t begin, end;
};
template <typename Table>
__device__ __forceinline__ BlockSlot slot_of(const Table& t) {
  const int64_t b = blockIdx.x;
  int k = 0;
  while (k + 1 < t.count && t.block_start[k + 1] <= b) ++k;
  const int64_t begin = (b - t.block_start[k]) * kChunk;
  const int64_t end = begin + kChunk < t.n[k] ? begin + kChunk : t.n[k];
  return {k, begin + threadIdx.x, end};
}

// ---------------------------------------------------------------- SGD

struct SgdTable {
  void* param[kMaxTensorsPerLaunch];
  const void* grad[kMaxTensorsPerLaunch];
  void* buf[kMaxTensorsPerLaunch];
  int64_t n[kMaxTensorsPerLaunch];
  int64_t block_start[kMaxTensorsPerLaunch + 1];
  bool initialized[kMaxTensorsPerLaunch];
  int count;
};

template <typename T>
struct SgdConsts {
  T wd, momentum, one_minus_dampening, neg_lr;
  bool maximize, weight_decay, nesterov, use_momentum;
};

// d_p = ±grad; d_p = d_p.add(param, alpha=wd); buf = clone(d_p) | buf.mul_(m).add_(d_p, alpha=1-damp);
// d_p = d_p.add(buf, alpha=m) | buf; param.add_(d_p, alpha=-lr). (As sgd_loop on the CPU.)
// S is the stored type, T the computed one (loads widen, stores round; no-ops when S == T).
template <typename S, typename T = typename ComputeOf<S>::type>
__global__ void __launch_bounds__(kThreads) sgd_kernel(SgdTable t, SgdConsts<T> c) {
  const BlockSlot s = slot_of(t);
  S* __restrict__ param = static_cast<S*>(t.param[s.k]);
  const S* __restrict__ grad = static_cast<const S*>(t.grad[s.k]);
  S* __restrict__ buf = static_cast<S*>(t.buf[s.k]);
  const bool initialized = t.initialized[s.k];
  for (int64_t i = s.begin; i < s.end; i += kThreads) {
    const T p = static_cast<T>(param[i]);
    const T g = static_cast<T>(grad[i]);
    T d = c.maximize ? -g : g;
    if (c.weight_decay) d = fma_rn(p, c.wd, d);
    if (c.use_momentum) {
      const T b = initialized ? fma_rn(d, c.one_minus_dampening, mul(static_cast<T>(buf[i]), c.momentum)) : d;
      buf[i] = static_cast<S>(b);
      d = c.nesterov ? fma_rn(b, c.momentum, d) : b;
    }
    param[i] = static_cast<S>(fma_rn(d, c.neg_lr, p));
  }
}

// ---------------------------------------------------------------- Adam / AdamW

struct AdamTable {
  void* param[kMaxTensorsPerLaunch];
  const void* grad[kMaxTensorsPerLaunch];
  void* exp_avg[kMaxTensorsPerLaunch];
  void* exp_avg_sq[kMaxTensorsPerLaunch];
  void* max_exp_avg_sq[kMaxTensorsPerLaunch];
  int64_t n[kMaxTensorsPerLaunch];
  int64_t block_start[kMaxTensorsPerLaunch + 1];
  // Per tensor (each has its own step count): -lr / bias_correction1 and sqrt(bias_correction2),
  // computed in double on the host as the CPU path does; cast to T in the kernel.
  double neg_step_size[kMaxTensorsPerLaunch];
  double bias_correction2_sqrt[kMaxTensorsPerLaunch];
  int count;
};

template <typename T>
struct AdamConsts {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, wd, decay;
  bool maximize, l2, decoupled, amsgrad;
};

// grad = ±grad; (Adam) grad = grad.add(param, alpha=wd) | (AdamW) param.mul_(1 - lr*wd);
// exp_avg.mul_(b1).add_(grad, alpha=1-b1); exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2);
// [amsgrad] max_sq = maximum(max_sq, exp_avg_sq);
// denom = (sq.sqrt() / sqrt(bc2)).add_(eps); param.addcdiv_(exp_avg, denom, value=-lr/bc1).
// (As adam_elements on the CPU.)
template <typename S, typename T = typename ComputeOf<S>::type>
__global__ void __launch_bounds__(kThreads) adam_kernel(AdamTable t, AdamConsts<T> c) {
  const BlockSlot s = slot_of(t);
  S* __restrict__ param = static_cast<S*>(t.param[s.k]);
  const S* __restrict__ grad = static_cast<const S*>(t.grad[s.k]);
  S* __restrict__ exp_avg = static_cast<S*>(t.exp_avg[s.k]);
  S* __restrict__ exp_avg_sq = static_cast<S*>(t.exp_avg_sq[s.k]);
  S* __restrict__ max_sq = static_cast<S*>(t.max_exp_avg_sq[s.k]);
  const T neg_step_size = static_cast<T>(t.neg_step_size[s.k]);
  const T bc2_sqrt = static_cast<T>(t.bias_correction2_sqrt[s.k]);
  for (int64_t i = s.begin; i < s.end; i += kThreads) {
    T p = static_cast<T>(param[i]);
    T g = static_cast<T>(grad[i]);
    if (c.maximize) g = -g;
    if (c.decoupled) p = mul(p, c.decay);
    if (c.l2) g = fma_rn(p, c.wd, g);
    const T m = fma_rn(g, c.one_minus_beta1, mul(static_cast<T>(exp_avg[i]), c.beta1));
    const T v = fma_rn(mul(c.one_minus_beta2, g), g, mul(static_cast<T>(exp_avg_sq[i]), c.beta2));
    exp_avg[i] = static_cast<S>(m);
    exp_avg_sq[i] = static_cast<S>(v);
    T v_used = v;
    if (c.amsgrad) {
      v_used = nan_max(static_cast<T>(max_sq[i]), v);
      max_sq[i] = static_cast<S>(v_used);
    }
    const T denom = add(div(sqrt_rn(v_used), bc2_sqrt), c.eps);
    param[i] = static_cast<S>(add(p, div(mul(neg_step_size, m), denom)));
  }
}

// Fills table.n and table.block_start for launch l of `numels`.
template <typename Table>
void fill_blocks(Table& table, const std::vector<int64_t>& numels, const MultiTensorLaunch& l) {
  table.count = static_cast<int>(l.count);
  int64_t blocks = 0;
  for (size_t j = 0; j < l.count; ++j) {
    table.n[j] = numels[l.first + j];
    table.block_start[j] = blocks;
    blocks += (table.n[j] + kChunk - 1) / kChunk;
  }
  table.block_start[l.count] = blocks;
}

using backend::with_param_type;

template <typename S>
void launch_sgd(int device, const std::vector<SgdTensor>& list, const backend::SgdScalars& s) {
  using T = typename ComputeOf<S>::type;
  SgdConsts<T> c;
  c.wd = static_cast<T>(s.weight_decay);
  c.momentum = static_cast<T>(s.momentum);
  c.one_minus_dampening = static_cast<T>(1.0 - s.dampening);
  c.neg_lr = static_cast<T>(-s.lr);
  c.maximize = s.maximize;
  c.weight_decay = s.weight_decay != 0;
  c.use_momentum = s.momentum != 0;
  c.nesterov = s.nesterov && c.use_momentum;
  std::vector<int64_t> numels;
  numels.reserve(list.size());
  for (const SgdTensor& e : list) numels.push_back(e.n);
  cudaStream_t stream = current_stream(device).handle();
  for (const MultiTensorLaunch& l : plan_launches(numels)) {
    if (l.blocks == 0) continue;
    SgdTable table{};
    fill_blocks(table, numels, l);
    for (size_t j = 0; j < l.count; ++j) {
      const SgdTensor& e = list[l.first + j];
      table.param[j] = e.param;
      table.grad[j] = e.grad;
      table.buf[j] = e.momentum_buffer;
      table.initialized[j] = e.buffer_initialized;
    }
    sgd_kernel<S><<<static_cast<unsigned>(l.blocks), kThreads, 0, stream>>>(table, c);
    DP_CUDA_CHECK(cudaGetLastError());
  }
}

template <typename S>
void launch_adam(int device, const std::vector<AdamTensor>& list, const backend::AdamScalars& s) {
  using T = typename ComputeOf<S>::type;
  AdamConsts<T> c;
  c.beta1 = static_cast<T>(s.beta1);
  c.one_minus_beta1 = static_cast<T>(1 - s.beta1);
  c.beta2 = static_cast<T>(s.beta2);
  c.one_minus_beta2 = static_cast<T>(1 - s.beta2);
  c.eps = static_cast<T>(s.eps);
  c.wd = static_cast<T>(s.weight_decay);
  c.decay = static_cast<T>(1 - s.lr * s.weight_decay);
  c.maximize = s.maximize;
  // As the CPU: AdamW's multiply by 1 - lr*wd is skipped when that is exactly 1.
  c.decoupled = s.decoupled_weight_decay && s.lr * s.weight_decay != 0;
  c.l2 = !s.decoupled_weight_decay && s.weight_decay != 0;
  c.amsgrad = s.amsgrad;
  std::vector<int64_t> numels;
  numels.reserve(list.size());
  for (const AdamTensor& e : list) numels.push_back(e.n);
  cudaStream_t stream = current_stream(device).handle();
  for (const MultiTensorLaunch& l : plan_launches(numels)) {
    if (l.blocks == 0) continue;
    AdamTable table{};
    fill_blocks(table, numels, l);
    for (size_t j = 0; j < l.count; ++j) {
      const AdamTensor& e = list[l.first + j];
      table.param[j] = e.param;
      table.grad[j] = e.grad;
      table.exp_avg[j] = e.exp_avg;
      table.exp_avg_sq[j] = e.exp_avg_sq;
      table.max_exp_avg_sq[j] = e.max_exp_avg_sq;
      const double bias_correction1 = 1 - std::pow(s.beta1, static_cast<double>(e.step));
      const double bias_correction2 = 1 - std::pow(s.beta2, static_cast<double>(e.step));
      table.neg_step_size[j] = -(s.lr / bias_correction1);
      table.bias_correction2_sqrt[j] = std::sqrt(bias_correction2);
    }
    adam_kernel<S><<<static_cast<unsigned>(l.blocks), kThreads, 0, stream>>>(table, c);
    DP_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

void sgd_update_kernel(DType dtype, int device, const std::vector<SgdTensor>& list, const backend::SgdScalars& s) {
  with_param_type(dtype, "SGD", [](auto) {});  // a bad dtype fails even for an empty list
  if (list.empty()) return;
  DeviceGuard guard(device);
  with_param_type(dtype, "SGD", [&](auto tag) { launch_sgd<decltype(tag)>(device, list, s); });
}

void adam_update_kernel(DType dtype, int device, const std::vector<AdamTensor>& list, const backend::AdamScalars& s) {
  with_param_type(dtype, "Adam", [](auto) {});
  if (list.empty()) return;
  DeviceGuard guard(device);
  with_param_type(dtype, "Adam", [&](auto tag) { launch_adam<decltype(tag)>(device, list, s); });
}

}  // namespace dp::backend::cuda::optim
