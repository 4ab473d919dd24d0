// The tensor ops sequence models need (dp/ops/sequence.h): tril, triu, sort, argsort, topk, cumsum,
// multinomial, repeat_interleave, masked_fill_ (einsum and baddbmm: einsum.cpp).
//
// tril/triu, sort/topk, cumsum and multinomial call kernels of backend/sequence_kernels.h (CPU
// only for now). On a device type without those kernels (CUDA): tril/triu are a masked_fill with a
// triangular mask (device kernels only); sort, argsort, topk, cumsum and multinomial run on a host
// copy, their results copied back (dp::to both ways, so gradients flow through the copies).
// repeat_interleave is written with expand/reshape and index_select (its repeats read on the host:
// they decide the output's size), masked_fill_ calls the masked_fill kernel, so both run on every
// backend.
//
// Tensor's methods for these ops are defined at the end of this file, beside the ops they forward
// to (the other methods: src/ops/tensor_methods.cpp).
#include "dp/ops/sequence.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backend/index_kernels.h"
#include "backend/random_kernels.h"
#include "backend/sequence_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/core/generator.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/shape.h"
#include "ops/common.h"
#include "ops/elementwise_common.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

// Whether `a` lives on a device type that `stub` has no kernel for (the op then runs on a host copy).
template <typename Stub>
bool runs_on_host_copy(const Stub& stub, const Tensor& a) {
  return !a.is_cpu() && !stub.has(a.device().type);
}

// ---------------------------------------------------------------------------------------------
// tril / triu

Tensor triangle(const char* op, const Tensor& a, int64_t diagonal, bool lower);

// The elements tril (triu) zeroes, as a bool [R, C] mask on `device`: j - i > diagonal (tril),
// j - i < diagonal (triu), from two aranges (device kernels only).
Tensor outside_triangle(int64_t R, int64_t C, int64_t diagonal, bool lower, Device device) {
  const TensorOptions o = TensorOptions().dtype(kInt64).device(device);
  const Tensor d = dp::sub(dp::reshape(dp::arange(C, o), {1, C}), dp::reshape(dp::arange(R, o), {R, 1}));  // j - i
  return lower ? dp::gt(d, diagonal) : dp::lt(d, diagonal);
}

Tensor triangle(const char* op, const Tensor& a, int64_t diagonal, bool lower) {
  ops::check_defined(op, a);
  DP_CHECK(a.dim() >= 2, ShapeError, op, ": input tensor must have at least 2 dimensions, got a ", a.dim(), "-D tensor of shape ", a.size_str());
  if (!backend::triangle_kernel.has(a.device().type)) {
    // The composite: masked_fill's device kernel (and its backward, the same mask on the gradient).
    const int64_t R = a.size(-2), C = a.size(-1);
    const int64_t d = std::clamp<int64_t>(diagonal, -(R + 1), C + 1);
    return dp::masked_fill(a, outside_triangle(R, C, d, lower, a.device()), 0);
  }
  Tensor out = make_empty(a.sizes(), a.dtype(), a.device());
  if (a.numel() > 0) backend::triangle_kernel(a.device().type, out, backend::contiguous_nograd(a), diagonal, lower);
  if (autograd::needs_grad(a)) {
    autograd::record(lower ? "TrilBackward0" : "TriuBackward0", {a}, {out}, [op, diagonal, lower](variable_list&& g) {
      return variable_list{triangle(op, g[0], diagonal, lower)};  // linear: the same mask on the gradient
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// sort / topk: values differentiable, the gradient scattered back through the indices.

void record_select_backward(const char* name, const Tensor& a, const Tensor& values, const Tensor& indices, int64_t dim) {
  if (!autograd::needs_grad(a)) return;
  SavedVariable si(indices, false);
  Shape shape = a.sizes();
  autograd::record(name, {a}, {values}, [si, dim, shape](variable_list&& g) {
    if (shape.empty()) return variable_list{g[0]};  // a 0-dim input: its one element
    // Indices are distinct within a row, so scatter_add is a scatter; differentiable (gather).
    return variable_list{dp::scatter_add(dp::zeros(shape, options_of(g[0])), dim, si.unpack(), g[0])};
  });
}

std::pair<Tensor, Tensor> sort_impl(const char* op, const Tensor& a, int64_t dim, bool descending) {
  ops::check_defined(op, a);
  dim = wrap_dim(dim, a.dim(), op);
  if (runs_on_host_copy(backend::sort_kernel, a)) {
    auto [v, i] = sort_impl(op, dp::to(a, Device::cpu(), a.dtype()), dim, descending);
    return {dp::to(v, a.device(), v.dtype()), dp::to(i, a.device(), kInt64)};
  }
  Tensor values = make_empty(a.sizes(), a.dtype(), a.device());
  Tensor indices = make_empty(a.sizes(), kInt64, a.device());
  if (a.numel() > 0)
    backend::sort_kernel(a.device().type, values, indices, backend::contiguous_nograd(a), backend::split_at(a.sizes(), dim), descending);
  record_select_backward("SortBackward0", a, values, indices, dim);
  return {values, indices};
}

// ---------------------------------------------------------------------------------------------
// cumsum: the gradient is the reverse cumsum (and the reverse cumsum's, the cumsum).

Tensor cumsum_impl(const Tensor& a, int64_t dim, bool reverse) {
  const DType out_dtype = is_floating_point(a.dtype()) ? a.dtype() : kInt64;  // integers and bool: int64, as PyTorch
  Tensor src = backend::contiguous_nograd(backend::convert_nograd(a, out_dtype));
  Tensor out = make_empty(a.sizes(), out_dtype, a.device());
  if (a.numel() > 0) backend::cumsum_kernel(a.device().type, out, src, backend::split_at(a.sizes(), dim), reverse);
  if (autograd::needs_grad(a)) {
    autograd::record("CumsumBackward0", {a}, {out}, [dim, reverse](variable_list&& g) { return variable_list{cumsum_impl(g[0], dim, !reverse)}; });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// multinomial

Generator& pick(Generator* gen, Device d) { return gen ? *gen : default_generator(d); }

[[noreturn]] void throw_bad_distribution(const Tensor& a, const backend::MultinomialProblem& bad, int64_t num_samples) {
  const std::string where = a.dim() == 2 ? detail::str(" at [", bad.row, ", ", bad.column, "]") : detail::str(" at [", bad.column, "]");
  const std::string row = a.dim() == 2 ? detail::str(" (row ", bad.row, ")") : std::string();
  switch (bad.kind) {
    case 1:
      throw ValueError(detail::str("multinomial: invalid multinomial distribution (encountering probability entry < 0): ", bad.value, where));
    case 2:
      throw ValueError(
          detail::str("multinomial: invalid multinomial distribution (encountering probability entry = infinity or NaN): ", bad.value, where));
    case 3:
      throw ValueError(detail::str("multinomial: invalid multinomial distribution (sum of probabilities <= 0)", row));
    default:
      throw ValueError(detail::str(
          "multinomial: invalid multinomial distribution (with replacement=False, not enough non-zero categories to sample): ", num_samples,
          " samples requested, but only ", bad.column, " categories have a non-zero probability", row));
  }
}

// ---------------------------------------------------------------------------------------------
// repeat_interleave

// The input seen along the repeated dim: flattened when dim is unset (a 0-dim input has no dim).
std::pair<Tensor, int64_t> repeat_operand(const char* op, const Tensor& a, std::optional<int64_t> dim) {
  if (!dim) return {dp::reshape(a, {a.numel()}), 0};
  DP_CHECK(a.dim() > 0, IndexError, op, ": Dimension specified as ", *dim, " but tensor has no dimensions");
  return {a, wrap_dim(*dim, a.dim(), op)};
}

}  // namespace

// -----------------------------------------------------------------------------------------------

Tensor tril(const Tensor& a, int64_t diagonal) { return triangle("tril", a, diagonal, true); }
Tensor triu(const Tensor& a, int64_t diagonal) { return triangle("triu", a, diagonal, false); }

std::pair<Tensor, Tensor> sort(const Tensor& a, int64_t dim, bool descending) { return sort_impl("sort", a, dim, descending); }

Tensor argsort(const Tensor& a, int64_t dim, bool descending) {
  NoGradGuard no_grad;  // the indices only
  return sort_impl("argsort", a, dim, descending).second;
}

std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest, bool sorted) {
  ops::check_defined("topk", a);
  dim = wrap_dim(dim, a.dim(), "topk");
  DP_CHECK(a.dtype() != kBool, DTypeError, "topk: \"topk_cpu\" not implemented for 'Bool'");
  const int64_t size = a.dim() == 0 ? 1 : a.size(dim);
  DP_CHECK(k >= 0 && k <= size, IndexError, "topk: selected index k out of range: k = ", k, " but dimension ", dim, " of the input ", a.size_str(),
           " has size ", size, " (k must be in [0, ", size, "])");
  if (runs_on_host_copy(backend::topk_kernel, a)) {
    auto [v, i] = topk(dp::to(a, Device::cpu(), a.dtype()), k, dim, largest, sorted);
    return {dp::to(v, a.device(), v.dtype()), dp::to(i, a.device(), kInt64)};
  }
  Shape out_shape = a.sizes();
  if (a.dim() > 0) out_shape[dim] = k;
  Tensor values = make_empty(out_shape, a.dtype(), a.device());
  Tensor indices = make_empty(out_shape, kInt64, a.device());
  // A 0-dim input gives its element for k = 0 too (PyTorch's result: the output has no dim to be 0).
  const int64_t kk = a.dim() == 0 ? 1 : k;
  if (values.numel() > 0)
    backend::topk_kernel(a.device().type, values, indices, backend::contiguous_nograd(a), backend::split_at(a.sizes(), dim), kk, largest, sorted);
  record_select_backward("TopkBackward0", a, values, indices, dim);
  return {values, indices};
}

Tensor cumsum(const Tensor& a, int64_t dim) {
  ops::check_defined("cumsum", a);
  dim = wrap_dim(dim, a.dim(), "cumsum");
  if (runs_on_host_copy(backend::cumsum_kernel, a)) {
    Tensor r = cumsum(dp::to(a, Device::cpu(), a.dtype()), dim);
    return dp::to(r, a.device(), r.dtype());
  }
  return cumsum_impl(a, dim, false);
}

Tensor multinomial(const Tensor& a, int64_t num_samples, bool replacement, Generator* gen) {
  ops::check_defined("multinomial", a);
  DP_CHECK(a.dim() == 1 || a.dim() == 2, ShapeError, "multinomial: prob_dist must be 1 or 2 dim, got a ", a.dim(), "-D tensor of shape ",
           a.size_str());
  DP_CHECK(is_floating_point(a.dtype()), DTypeError, "multinomial: only supports floating-point dtypes for input, got: ", dtype_name(a.dtype()));
  DP_CHECK(num_samples > 0, ValueError, "multinomial: cannot sample n_sample <= 0 samples (num_samples = ", num_samples, ")");
  const int64_t C = a.size(-1), R = a.dim() == 2 ? a.size(0) : 1;
  DP_CHECK(replacement || num_samples <= C, ValueError, "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement (",
           num_samples, " samples, ", C, " categories)");
  DP_CHECK(C <= (int64_t{1} << 24), ValueError, "multinomial: number of categories cannot exceed 2^24 (got ", C, ")");
  DP_CHECK(C > 0 || R == 0, ValueError, "multinomial: the probability distribution has no categories (input shape ", a.size_str(), ")");
  if (runs_on_host_copy(backend::multinomial_kernel, a)) {  // drawn on the host from the device's generator
    Generator& dg = pick(gen, a.device());
    Tensor r = multinomial(dp::to(a, Device::cpu(), a.dtype()).detach(), num_samples, replacement, &dg);
    return dp::to(r, a.device(), kInt64);
  }
  Tensor p = backend::contiguous_nograd(a);
  p = backend::restride_nograd(p, {R, C}, {C, 1});
  const DeviceType type = a.device().type;
  if (backend::MultinomialProblem bad; R > 0 && !backend::multinomial_check_kernel(type, p, num_samples, replacement, bad))
    throw_bad_distribution(a, bad, num_samples);
  // One sample without replacement is one draw from the distribution: the (cheaper) with-replacement
  // path draws it.
  if (num_samples == 1) replacement = true;
  Tensor out = make_empty({R, num_samples}, kInt64, a.device());
  if (R > 0) {
    Generator& g = pick(gen, a.device());
    const uint64_t first = g.reserve(backend::blocks_for(R * (replacement ? num_samples : C), 2));
    const uint64_t seed = g.seed();
    backend::multinomial_kernel(type, out, p, num_samples, replacement, seed, first);
  }
  return a.dim() == 1 ? backend::restride_nograd(out, {num_samples}, {1}) : out;
}

Tensor repeat_interleave(const Tensor& a, int64_t repeats, std::optional<int64_t> dim) {
  ops::check_defined("repeat_interleave", a);
  DP_CHECK(repeats >= 0, ValueError, "repeat_interleave: repeats can not be negative (got ", repeats, ")");
  auto [x, d] = repeat_operand("repeat_interleave", a, dim);
  if (repeats == 1) return dp::clone(x);  // a new tensor, as PyTorch's (never a view of the input)
  // Each element repeated: x.unsqueeze(d + 1) expanded to `repeats` along the new dim (a view),
  // then merged with dim d (one copy). Differentiable: the gradient sums back over the repeats.
  Shape expanded = x.sizes();
  expanded.insert(expanded.begin() + d + 1, repeats);
  Shape out_shape = x.sizes();
  out_shape[d] *= repeats;
  return dp::reshape(dp::expand(dp::unsqueeze(x, d + 1), expanded), out_shape);
}

Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim) {
  const char* op = "repeat_interleave";
  ops::check_defined(op, a);
  ops::check_defined(op, repeats, "repeats");
  DP_CHECK(repeats.dtype() == kInt64 || repeats.dtype() == kInt32, DTypeError, op, ": repeats must be an int64 or int32 tensor, got ",
           dtype_name(repeats.dtype()));
  DP_CHECK(repeats.dim() <= 1, ShapeError, op, ": repeats must be 0-dim or 1-dim tensor, got shape ", repeats.size_str());
  auto [x, d] = repeat_operand(op, a, dim);
  const int64_t size = x.size(d);
  // The counts are needed on the host to size the result (on a device: a copy and a wait, as PyTorch).
  std::vector<int64_t> r = backend::read_index_values(op, repeats.is_cpu() ? repeats : dp::to(repeats, Device::cpu(), repeats.dtype()));
  if (r.size() == 1 && size != 1) r.assign(static_cast<size_t>(size), r[0]);  // one count for every element
  DP_CHECK(static_cast<int64_t>(r.size()) == size, ShapeError, op, ": repeats must have the same size as input along dim (repeats has ", r.size(),
           " elements, the input ", a.size_str(), " has ", size, dim ? detail::str(" along dim ", d) : std::string(" elements"), ")");
  int64_t total = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    DP_CHECK(r[i] >= 0, ValueError, op, ": repeats can not be negative (repeats[", i, "] = ", r[i], ")");
    total += r[i];
  }
  std::vector<int64_t> index;
  index.reserve(static_cast<size_t>(total));
  for (size_t i = 0; i < r.size(); ++i) index.insert(index.end(), static_cast<size_t>(r[i]), static_cast<int64_t>(i));
  // Differentiable through index_select (its backward adds the repeated rows back up).
  return dp::index_select(x, d, from_blob_copy(index.data(), {total}, kInt64, x.device()));
}

Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Scalar& value) {
  const char* op = "masked_fill_";
  ops::check_defined(op, self);
  ops::check_defined(op, mask, "mask");
  ops::check_same_device(op, {&self, &mask});
  DP_CHECK(mask.dtype() == kBool, DTypeError, op, ": only supports boolean masks, but got mask with dtype ", dtype_name(mask.dtype()));
  autograd::check_inplace(self, op);
  ops::check_inplace_shape(op, self, mask);  // the mask broadcasts to self; self never grows
  ops::check_no_internal_overlap(op, self);
  const Tensor m = ops::unaliased(self, mask);
  backend::masked_fill_kernel(self.device().type, self, self, m, value);
  self.bump_version();
  if (autograd::needs_grad(self)) {
    SavedVariable sm(m, false);
    ops::record_inplace("MaskedFillBackward0", {&self}, self,
                        [sm](autograd::Node&, const Tensor& g) { return variable_list{dp::masked_fill(g, sm.unpack(), 0)}; });
  }
  return self;
}

// ---- Tensor's methods (see the note at the top) ----

Tensor Tensor::tril(int64_t d) const { return dp::tril(*this, d); }
Tensor Tensor::triu(int64_t d) const { return dp::triu(*this, d); }
std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t d, bool l, bool s) const { return dp::topk(*this, k, d, l, s); }
std::pair<Tensor, Tensor> Tensor::sort(int64_t d, bool desc) const { return dp::sort(*this, d, desc); }
Tensor Tensor::argsort(int64_t d, bool desc) const { return dp::argsort(*this, d, desc); }
Tensor Tensor::cumsum(int64_t d) const { return dp::cumsum(*this, d); }
Tensor Tensor::repeat_interleave(int64_t r, std::optional<int64_t> d) const { return dp::repeat_interleave(*this, r, d); }
Tensor Tensor::repeat_interleave(const Tensor& r, std::optional<int64_t> d) const { return dp::repeat_interleave(*this, r, d); }
Tensor Tensor::baddbmm(const Tensor& b1, const Tensor& b2, const Scalar& beta, const Scalar& alpha) const {
  return dp::baddbmm(*this, b1, b2, beta, alpha);
}
Tensor Tensor::multinomial(int64_t n, bool r, Generator* g) const { return dp::multinomial(*this, n, r, g); }
Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) { return dp::masked_fill_(*this, mask, value); }

}  // namespace dp
