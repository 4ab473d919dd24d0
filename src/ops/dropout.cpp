// Inverted dropout. The keep mask (bool, one byte per element) is drawn from the Philox generator
// (one 32-bit word per element, so a seeded Generator reproduces it) in the same pass that writes
// the output x * (mask ? 1/(1-p) : 0); the plain backward is one fused pass too, the mask being
// the only thing saved.
#include "dp/ops/dropout.h"

#include "backend/random_kernels.h"
#include "backend/copy_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "ops/common.h"
#include "ops/reduction_helpers.h"

namespace dp {
namespace {

using autograd::variable_list;

void check_dropout(const char* op, const Tensor& input, double p) {
  ops::check_defined(op, input);
  DP_CHECK(p >= 0.0 && p <= 1.0, ValueError, op, ": dropout probability has to be between 0 and 1, but got ", p);
}

bool is_identity(const Tensor& input, double p, bool training) { return !training || p == 0.0 || input.numel() == 0; }

void check_runnable(const char* op, const Tensor& input) {
  if (input.is_cpu()) ops::check_cpu_tensor(op, input);
  DP_CHECK(is_floating_point(input.dtype()), DTypeError, op, ": expected a floating point input, got ", input.describe());
}

// Draws the keep mask (probability 1 - p) and writes out = x * mask / (1 - p) in one pass;
// p = 1 draws nothing (PyTorch multiplies by zero directly). x may be out.
// Every backend draws the same mask (same Philox words): backend/random_kernels.h.
void apply_mask(const Tensor& x, const Tensor& mask, double scale, const Tensor& out) {
  backend::dropout_apply_kernel(x.device().type, x, mask, scale, out);
}

void dropout_into(const Tensor& x, double p, Generator* gen, const Tensor& mask, const Tensor& out) {
  if (p >= 1.0) {
    backend::fill_kernel(mask.device().type, mask, false);
    apply_mask(x, mask, 0.0, out);
    return;
  }
  Generator& g = gen ? *gen : default_generator(x.device());
  const uint64_t first = g.reserve(static_cast<uint64_t>((x.numel() + 3) / 4));
  backend::dropout_forward_kernel(x.device().type, x, 1.0 - p, 1.0 / (1.0 - p), g.seed(), first, mask, out);
}

double keep_scale(double p) { return p >= 1.0 ? 0.0 : 1.0 / (1.0 - p); }

}  // namespace

Tensor dropout(const Tensor& input, double p, bool training, Generator* gen) {
  check_dropout("dropout", input, p);
  if (is_identity(input, p, training)) return input;
  check_runnable("dropout", input);
  const double scale = keep_scale(p);
  Tensor mask = make_empty(input.sizes(), kBool, input.device());
  Tensor out = make_empty(input.sizes(), input.dtype(), input.device());
  dropout_into(backend::contiguous_nograd(input), p, gen, mask, out);
  if (autograd::needs_grad(input)) {
    const DType dt = input.dtype();
    autograd::record("NativeDropoutBackward0", {input}, {out}, [mask, scale, dt](variable_list&& grads) {
      const Tensor& g = grads[0];
      if (GradMode::is_enabled()) {
        // create_graph: the same product in dp ops, differentiable in g.
        return variable_list{dp::mul(g, dp::mul(backend::convert_nograd(mask, dt), scale))};
      }
      Tensor gi = make_empty(mask.sizes(), dt, mask.device());
      apply_mask(backend::contiguous_nograd(backend::convert_nograd(g, dt)), mask, scale, gi);
      return variable_list{gi};
    });
  }
  return out;
}

Tensor& dropout_(Tensor& input, double p, bool training, Generator* gen) {
  check_dropout("dropout_", input, p);
  if (is_identity(input, p, training)) return input;
  check_runnable("dropout_", input);
  autograd::check_inplace(input, "dropout_");
  // noise = mask / (1 - p) in the input's dtype; mul_ does the in-place update, its autograd
  // (history rebased onto a MulBackward) and the version bump.
  Tensor mask = make_empty(input.sizes(), kBool, input.device());
  Tensor noise = make_empty(input.sizes(), input.dtype(), input.device());
  backend::fill_kernel(noise.device().type, noise, 1.0);
  dropout_into(noise, p, gen, mask, noise);
  input.mul_(noise);
  return input;
}

namespace {

// feature_dropout's noise: [N, C, 1, ..., 1] holding 0 or 1 / (1 - p) in the input's dtype, or a
// 0-d zero for p = 1 (PyTorch multiplies by zero without drawing).
Tensor feature_noise(const Tensor& input, double p, Generator* gen) {
  const TensorOptions opts = options_of(input);
  if (p >= 1.0) return zeros({}, opts);
  Shape sizes(static_cast<size_t>(input.dim()), 1);
  sizes[0] = input.size(0);
  sizes[1] = input.size(1);
  Tensor noise = empty(sizes, opts);
  bernoulli_(noise, 1.0 - p, gen);
  noise.div_(1.0 - p);  // as PyTorch: the kept value is 1 / (1 - p) rounded once in the dtype
  return noise;
}

}  // namespace

Tensor feature_dropout(const Tensor& input, double p, bool training, Generator* gen) {
  check_dropout("feature_dropout", input, p);
  DP_CHECK(input.dim() >= 2, ShapeError, "feature_dropout: Feature dropout requires at least 2 dimensions in the input, got ", input.describe());
  if (is_identity(input, p, training)) return input;
  check_runnable("feature_dropout", input);
  return dp::mul(input, feature_noise(input, p, gen));
}

Tensor& feature_dropout_(Tensor& input, double p, bool training, Generator* gen) {
  check_dropout("feature_dropout_", input, p);
  DP_CHECK(input.dim() >= 2, ShapeError, "feature_dropout_: Feature dropout requires at least 2 dimensions in the input, got ", input.describe());
  if (is_identity(input, p, training)) return input;
  check_runnable("feature_dropout_", input);
  autograd::check_inplace(input, "feature_dropout_");
  input.mul_(feature_noise(input, p, gen));
  return input;
}

}  // namespace dp
