#pragma once
// Shared by the loss ops (src/ops/loss_*.cpp): argument checks, 0-dim results, the class geometry,
// and the arguments of the backends' kernels (backend/loss_kernels.h).
#include <cmath>
#include <cstdint>
#include "backend/loss_kernels.h"
#include "backend/dispatch.h"
#include "backend/copy_kernels.h"
#include "backend/reduce_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/loss.h"
#include "ops/common.h"

namespace dp::loss {

// input: defined, float32 or float64 (on a CUDA device also float16 or bfloat16).
void check_input(const char* op, const Tensor& input);
// A floating tensor used with `input` (target, weight, pos_weight) must have input's dtype and
// device. `what` names it in the message.
void check_companion(const char* op, const Tensor& input, const Tensor& t, const char* what);
// weight / pos_weight are constants: PyTorch refuses ones that require grad.
void check_constant(const char* op, const Tensor& t, const char* what);
// g converted to dtype and made contiguous (no autograd).
Tensor plain(const Tensor& g, DType dtype);

// An input [N, C, d1, ...] (or [C]: N = 1) seen as [N, C, S] with S = d1 * ...; the class dim is
// 1 (0 for [C]). out_shape is the shape of the per-sample losses: [N, d1, ...] ([] for [C]).
struct ClassGeometry {
  int64_t n = 1, c = 1, s = 1;
  int64_t class_dim = 1;
  Shape out_shape;
};
// Checks a class-index target against the input (shapes as PyTorch's nll_loss_nd does).
ClassGeometry class_geometry(const char* op, const Tensor& input, const Tensor& target);
// Class indices: int64, or uint8 (PyTorch accepts Byte targets); else DTypeError.
void check_class_target_dtype(const char* op, const Tensor& target);
// weight: undefined or [C] of the input's dtype, not requiring grad.
void check_class_weight(const char* op, const Tensor& input, const Tensor& weight, int64_t n_classes);
// The message for a target outside [0, C).
[[noreturn]] void throw_target_out_of_bounds(const char* op, int64_t target, int64_t n_classes, int64_t ignore_index);
// A CUDA kernel reported a bad target: the CPU's IndexError for the first one, from the targets
// read on the host.
[[noreturn]] void throw_first_bad_target(const char* op, const Tensor& target, int64_t n_classes, int64_t ignore_index);
// A 0-dim tensor holding v on `device`, filled there (no host-to-device copy).
Tensor device_scalar(double v, DType dtype, Device device);
// The gradient of per-sample losses ([N, d1, ...] or []) shaped to broadcast against the input
// ([N, 1, d1, ...]); dp ops (differentiable).
Tensor per_sample_to_input(const Tensor& g, const ClassGeometry& geo);
// The geometry as the kernels take it.
inline backend::ClassShape class_shape(const ClassGeometry& geo) { return backend::ClassShape{geo.n, geo.c, geo.s}; }
// The incoming gradient for a backward kernel: per-sample (None) or one value, times scale and
// divided by `divisor` (Mean's total weight, 0-dim on the input's device) for Mean when it is
// given; in `dtype`, contiguous, on g's device.
backend::LossGrad loss_grad(const Tensor& g, Reduction red, DType dtype, double scale, const Tensor& divisor = {});

// ---- MeanLossRecorder (dp/ops/loss.h): a Mean computed as sum / count and recorded ----
// What a class-index loss's Mean divides by: the summed weight[t] of the non-ignored targets (their
// count without weight); no autograd.
Tensor class_mean_count(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index);
// n as the count of a mean of `input`'s loss.
Tensor mean_count(double n, const Tensor& input);
// The mean sum / count, recorded by this thread's recorder (which must exist).
Tensor record_mean(const Tensor& sum, const Tensor& count);

}  // namespace dp::loss
