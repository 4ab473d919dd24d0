#pragma once
// Autocast (automatic mixed precision), as PyTorch 1.13's torch.autocast and libtorch's
// at::autocast functions.
//
//   {
//     dp::AutocastGuard autocast(dp::DeviceType::CPU, dp::kBFloat16);  // torch.autocast("cpu", torch.bfloat16)
//     Tensor out = model->forward(x);    // linear/conv2d/matmul run in bfloat16
//     Tensor loss = dp::mse_loss(out, y);  // losses run in float32
//   }
//   loss.backward();  // gradients reach the float32 parameters in float32
//
// While autocast is on for a device type, the ops on PyTorch's autocast lists cast their floating
// inputs of that device type before running (docs/mixed-precision.md lists them):
//  - lower precision (linear, mm, matmul, addmm, bmm, conv2d; on CUDA also lstm_cell): to the
//    autocast dtype (CPU: bfloat16; CUDA: float16 by default, or bfloat16);
//  - float32 (the losses; on CUDA also exp, log, pow, softmax, layer_norm, sum, ...): to float32;
//  - promote (CPU: cat, stack; CUDA: dot): to the widest floating type among the inputs.
// Other ops are untouched: they run in the dtypes they are given. Float64 tensors are never cast.
// The casts are ordinary differentiable ops, so backward runs in the dtypes forward used and the
// gradient of a float32 parameter arrives in float32. Within a region, the lower-precision copy of
// a float32 leaf that requires grad (a parameter) is made once and reused (the cast cache); the
// cache is cleared when the outermost region on the thread ends.
//
// The state is per thread, like grad mode. DataParallel's replicas run with the caller's autocast
// state (each replica's forward is an autocast region of its own on its worker thread).
#include <cstddef>
#include <optional>
#include "dp/core/device.h"
#include "dp/core/dtype.h"

namespace dp::autocast {

// at::autocast's flags: is_enabled/set_enabled are CUDA's, is_cpu_enabled/set_cpu_enabled the CPU's.
bool is_enabled();
void set_enabled(bool enabled);
bool is_cpu_enabled();
void set_cpu_enabled(bool enabled);
bool is_enabled(DeviceType device);
void set_enabled(DeviceType device, bool enabled);

// The lower-precision dtype of each device type: CUDA float16 (or bfloat16), CPU bfloat16. Setting
// an unsupported one throws ValueError (CPU: only bfloat16; CUDA: float16 or bfloat16).
DType get_autocast_gpu_dtype();
DType get_autocast_cpu_dtype();
void set_autocast_gpu_dtype(DType dtype);
void set_autocast_cpu_dtype(DType dtype);
DType get_autocast_dtype(DeviceType device);
void set_autocast_dtype(DeviceType device, DType dtype);

// The cast cache (see above). Disabling it makes every cast a fresh copy.
bool is_autocast_cache_enabled();
void set_autocast_cache_enabled(bool enabled);
void clear_cache();
// How many casts are cached on this thread (a test and debugging hook).
size_t cache_size();
// Region depth on this thread (torch.autocast_increment_nesting / autocast_decrement_nesting): the
// region that brings it back to 0 clears the cache. Both return the new depth.
int increment_nesting();
int decrement_nesting();

// torch.autocast(device_type, dtype, enabled, cache_enabled) as a scope: sets the device type's
// flag and dtype (dtype left out: the device type's current one) and the cache flag, enters a
// region, and restores all of them at the end (clearing the cache if it was the outermost region).
// Nested guards stack; Guard(type, std::nullopt, false) switches autocast off inside a region.
class Guard {
 public:
  explicit Guard(DeviceType device, std::optional<DType> dtype = std::nullopt, bool enabled = true, std::optional<bool> cache_enabled = std::nullopt);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_enabled_;
};

// A thread's whole autocast state: what a worker thread needs to run forward code as its caller would.
struct ThreadState {
  bool cpu_enabled = false;
  bool cuda_enabled = false;
  DType cpu_dtype = kBFloat16;
  DType cuda_dtype = kFloat16;
  bool cache_enabled = true;
  static ThreadState current();
};

// Runs a scope with a captured ThreadState, as a region of its own: DataParallel's replica threads
// use it as they use AutoGradMode for grad mode. The previous state comes back at the end.
class ThreadStateGuard {
 public:
  explicit ThreadStateGuard(const ThreadState& state);
  ~ThreadStateGuard();
  ThreadStateGuard(const ThreadStateGuard&) = delete;
  ThreadStateGuard& operator=(const ThreadStateGuard&) = delete;

 private:
  ThreadState prev_;
};

}  // namespace dp::autocast

namespace dp {
// The name a libtorch user looks for first.
using AutocastGuard = autocast::Guard;
}  // namespace dp
