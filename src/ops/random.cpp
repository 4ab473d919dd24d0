// Random tensors from the counter-based Philox generator (see src/core/generator.cpp).
//
// Every op reserves the blocks it needs from the generator up front and element i (in row-major
// order of the logical shape, whatever the memory layout) reads fixed words of a fixed block, so
// the output depends only on the generator state, the shape and the dtype:
//   - 32-bit draws (rand/uniform_ for float32, float16, bfloat16): element i uses word i % 4 of
//     block i / 4;
//   - 64-bit draws (float64 uniforms, bernoulli_, randint, each Fisher-Yates swap of randperm):
//     element i uses words 2(i%2), 2(i%2)+1 of block i / 2;
//   - normals (randn, normal_): elements 2k and 2k+1 are the Box-Muller pair of block k (two
//     53-bit uniforms).
#include <cmath>
#include <limits>
#include "dp/core/pooled.h"
#include "backend/random_kernels.h"
#include "backend/copy_kernels.h"
#include "backend/dispatch.h"
#include "dp/autograd/function.h"
#include "dp/core/device_registry.h"
#include "dp/ops/factory.h"
#include "ops/common.h"

namespace dp {

namespace {

using backend::blocks_for;

Generator& pick(Generator* gen, Device d) { return gen ? *gen : default_generator(d); }

// Fills t from the Philox stream (seed, first) on its device's backend, through a contiguous
// buffer when t is not contiguous, and bumps the version counter.
void device_fill(Tensor& t, backend::RandomKind kind, uint64_t seed, uint64_t first, double a, double b) {
  Tensor dst = t.is_contiguous() ? t : make_empty(t.sizes(), t.dtype(), t.device());
  backend::random_fill_kernel(t.device().type, kind, dst, seed, first, a, b);
  if (!dst.is_same(t)) backend::copy_kernel(backend::copy_device_type(t, dst), t, dst);
  t.bump_version();
}

// In-place random ops: not allowed on leaves that require grad (with grad mode on). On a tensor
// with history the new values do not depend on the old ones, so its history is replaced by a node
// that passes no gradient on.
void inplace_prologue(const Tensor& t, const char* op) {
  ops::check_defined(op, t);
  autograd::check_inplace(t, op);
}
void inplace_epilogue(Tensor& t, const char* node_name) {
  if (GradMode::is_enabled() && t.requires_grad() && !t.is_leaf()) {
    auto node = ::dp::detail::make_pooled<autograd::FunctionNode>(node_name, [](autograd::variable_list&&) { return autograd::variable_list{}; });
    autograd::rebase_history(t, node);
  }
}

// U[from, to) for floating types: 24-bit (float32), 11-bit (float16), 8-bit (bfloat16) or 53-bit
// (float64) uniforms, so the unit draw is exactly representable and never rounds up to 1.
void uniform_fill(Tensor& t, double from, double to, Generator& g) {
  const DType dt = t.dtype();
  DP_CHECK(is_floating_point(dt), DTypeError, "uniform_: expected a floating point tensor, got ", dtype_name(dt), " (use randint for integers)");
  const int64_t n = t.numel();
  const bool wide = dt == kFloat64;
  const int per_block = wide ? 2 : 4;
  const uint64_t first = g.reserve(blocks_for(n, per_block));
  const uint64_t seed = g.seed();
  device_fill(t, backend::RandomKind::Uniform, seed, first, from, to);
}

// N(mean, std) by Box-Muller on two 53-bit uniforms per block (u1 in (0, 1] so log is finite).
void normal_fill(Tensor& t, double mean, double std, Generator& g) {
  const DType dt = t.dtype();
  DP_CHECK(is_floating_point(dt), DTypeError, "normal_: expected a floating point tensor, got ", dtype_name(dt));
  const int64_t n = t.numel();
  const uint64_t first = g.reserve(blocks_for(n, 2));
  const uint64_t seed = g.seed();
  device_fill(t, backend::RandomKind::Normal, seed, first, mean, std);
}

void check_factory(const char* op, IntArrayRef sizes, const TensorOptions& opts) {
  for (int64_t s : sizes) DP_CHECK(s >= 0, ShapeError, op, ": Trying to create tensor with negative dimension ", s, ": ", shape_str(sizes));
  check_device(opts.device_);
}

Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor rand(IntArrayRef sizes, TensorOptions opts, Generator* gen) {
  check_factory("rand", sizes, opts);
  DP_CHECK(is_floating_point(opts.dtype_), DTypeError, "rand: expected a floating point dtype, got ", dtype_name(opts.dtype_));
  Tensor t = make_empty(sizes, opts.dtype_, opts.device_);
  uniform_fill(t, 0.0, 1.0, pick(gen, opts.device_));
  return finish(t, opts);
}

Tensor randn(IntArrayRef sizes, TensorOptions opts, Generator* gen) {
  check_factory("randn", sizes, opts);
  DP_CHECK(is_floating_point(opts.dtype_), DTypeError, "randn: expected a floating point dtype, got ", dtype_name(opts.dtype_));
  Tensor t = make_empty(sizes, opts.dtype_, opts.device_);
  normal_fill(t, 0.0, 1.0, pick(gen, opts.device_));
  return finish(t, opts);
}

Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions opts, Generator* gen) {
  check_factory("randint", sizes, opts);
  DP_CHECK(low < high, ValueError, "randint: random_ expects 'from' to be less than 'to', but got from=", low, " >= to=", high);
  // The range must fit the dtype (floating types take any range; large values round).
  backend::dispatch_all(opts.dtype_, "randint", [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, int64_t>) {
      const int64_t lo = std::is_same_v<T, bool> ? 0 : static_cast<int64_t>(std::numeric_limits<T>::min());
      const int64_t hi = std::is_same_v<T, bool> ? 1 : static_cast<int64_t>(std::numeric_limits<T>::max());
      DP_CHECK(low >= lo && high - 1 <= hi, ValueError, "randint: the range [", low, ", ", high, ") does not fit dtype ", dtype_name(opts.dtype_),
               " ([", lo, ", ", hi, "])");
    }
  });
  Tensor t = make_empty(sizes, opts.dtype_, opts.device_);
  Generator& g = pick(gen, opts.device_);
  const uint64_t first = g.reserve(blocks_for(t.numel(), 2));
  const uint64_t seed = g.seed();
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  if (t.numel() > 0) backend::randint_fill_kernel(t.device().type, t, seed, first, low, range);
  return finish(t, opts);
}

Tensor randperm(int64_t n, TensorOptions opts, Generator* gen) {
  DP_CHECK(n >= 0, ValueError, "randperm: n must be non-negative, got ", n);
  check_factory("randperm", {n}, opts);
  Generator& g = pick(gen, opts.device_);
  // Fisher-Yates: swap i (from n-1 down to 1) with a uniform j in [0, i]; swap number s = n-1-i
  // uses draw s.
  const int64_t draws = n > 1 ? n - 1 : 0;
  const uint64_t first = g.reserve(blocks_for(draws, 2));
  const uint64_t seed = g.seed();
  Tensor idx = make_empty({n}, kInt64, opts.device_);
  if (n > 0) backend::randperm_fill_kernel(idx.device().type, idx, seed, first);
  Tensor out = idx;
  if (opts.dtype_ != kInt64) {
    out = make_empty({n}, opts.dtype_, opts.device_);
    backend::copy_kernel(backend::copy_device_type(out, idx), out, idx);
  }
  return finish(out, opts);
}

Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.sizes(), options_of(t), gen); }
Tensor randn_like(const Tensor& t, Generator* gen) { return randn(t.sizes(), options_of(t), gen); }

Tensor& uniform_(Tensor& t, double from, double to, Generator* gen) {
  inplace_prologue(t, "uniform_");
  DP_CHECK(from <= to, ValueError, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  DP_CHECK(std::isfinite(from) && std::isfinite(to), ValueError, "uniform_: from and to must be finite, got from=", from, ", to=", to);
  uniform_fill(t, from, to, pick(gen, t.device()));
  inplace_epilogue(t, "UniformBackward0");
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  inplace_prologue(t, "normal_");
  DP_CHECK(std >= 0.0, ValueError, "normal_ expects std >= 0.0, but found std ", std);
  normal_fill(t, mean, std, pick(gen, t.device()));
  inplace_epilogue(t, "NormalBackward0");
  return t;
}

Tensor& bernoulli_(Tensor& t, double p, Generator* gen) {
  inplace_prologue(t, "bernoulli_");
  DP_CHECK(p >= 0.0 && p <= 1.0, ValueError, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  Generator& g = pick(gen, t.device());
  const int64_t n = t.numel();
  const uint64_t first = g.reserve(blocks_for(n, 2));
  const uint64_t seed = g.seed();
  device_fill(t, backend::RandomKind::Bernoulli, seed, first, p, 0.0);
  inplace_epilogue(t, "BernoulliBackward1");
  return t;
}

}  // namespace dp
