// scaled_dot_product_attention: argument checks, the choice between the fused kernel and the exact
// path, and their autograd.
//
// The fused path (CPU, no dropout) hands the backend (backend/attention_kernels.h) one attention
// problem per element of the output's leading dims; each operand is read in place through
// per-problem offsets (stride 0 where it broadcasts, the head index divided by the group size
// under enable_gqa) and its row stride, so views such as MultiheadAttention's
// x.view(B, L, H, E).transpose(1, 2) are not copied. The output and the gradients are laid out
// [N..., L, H, E] in memory and returned as [N..., H, L, E] views, as PyTorch's CPU flash kernel
// does, so that the usual transpose(1, 2).reshape(B, L, H * E) that follows costs no copy. One node
// (ScaledDotProductFlashAttentionForCpuBackward0) saves q, k, v, the output and the log-sum-exp of
// each row; its backward runs the fused backward kernel, or, under create_graph, the same
// gradients written with differentiable ops (the exact path's formulas).
//
// The exact path materialises the weights: X = (q * scale) @ k^T + bias, P = softmax(X) with
// fully masked rows set to zero (PyTorch's _safe_softmax), P = dropout(P), out = P @ v, each step
// an op with its own autograd (so double backward works). It serves dropout, CUDA tensors and
// the math backend of SDPAKernelGuard.
#include "dp/ops/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/attention_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/autograd/function.h"
#include "dp/ops/dropout.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/ops/linalg.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/attention_internal.h"
#include "ops/common.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

constexpr const char* kOp = "scaled_dot_product_attention";

// Sequences up to this long (queries and keys), unmasked and not causal, take the exact path when
// the choice is automatic (see scaled_dot_product_attention).
constexpr int64_t kShortExact = 128;

thread_local int t_backend = -1;  // -1: automatic; else an SDPBackend
thread_local int64_t t_block_q = 0, t_block_k = 0;

bool is_half(DType t) { return t == kBFloat16 || t == kFloat16; }

// The checked geometry of one call.
struct Geometry {
  Shape batch;  // the output's leading dims: q's, k's and v's (heads repeated under gqa) broadcast
  int64_t problems = 1;
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  int64_t group_k = 1, group_v = 1;  // enable_gqa: query heads per key / value head
  double scale = 1.0;
};

IntArrayRef leading(const Tensor& t) { return IntArrayRef(t.sizes().data(), t.sizes().size() - 2); }

std::string shapes_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return "query " + q.size_str() + ", key " + k.size_str() + " and value " + v.size_str();
}

Geometry check_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p, bool causal, std::optional<double> scale,
                    bool gqa) {
  ops::check_defined(kOp, q, "query");
  ops::check_defined(kOp, k, "key");
  ops::check_defined(kOp, v, "value");
  ops::check_same_device(kOp, {&q, &k, &v, &mask});
  DP_CHECK(is_floating_point(q.dtype()), DTypeError, kOp, ": expected floating point query, key and value, got query of dtype ",
           dtype_name(q.dtype()));
  DP_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), DTypeError, kOp,
           ": expected query, key and value to have the same dtype, but got query.dtype: ", dtype_name(q.dtype()),
           ", key.dtype: ", dtype_name(k.dtype()), " and value.dtype: ", dtype_name(v.dtype()));
  DP_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, ShapeError, kOp, ": expected query, key and value to be at least 2-D, got ",
           shapes_of(q, k, v));
  DP_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, ValueError, kOp, ": dropout_p has to be between 0 and 1, but got ", dropout_p);
  DP_CHECK(!(causal && mask.defined()), ValueError, kOp, ": explicit attn_mask should not be set when is_causal=True");

  Geometry g;
  g.L = q.size(-2);
  g.E = q.size(-1);
  g.S = k.size(-2);
  g.Ev = v.size(-1);
  DP_CHECK(k.size(-1) == g.E, ShapeError, kOp, ": query and key must have the same embedding size (last dim), got ", shapes_of(q, k, v));
  DP_CHECK(v.size(-2) == g.S, ShapeError, kOp, ": key and value must have the same sequence length (dim -2), got ", shapes_of(q, k, v));

  Shape kb = leading(k).vec(), vb = leading(v).vec();
  if (gqa) {
    DP_CHECK(q.dim() >= 3 && k.dim() >= 3 && v.dim() >= 3, ShapeError, kOp, ": enable_gqa needs a heads dim (-3) in query, key and value, got ",
             shapes_of(q, k, v));
    const int64_t hq = q.size(-3), hk = k.size(-3), hv = v.size(-3);
    DP_CHECK(hk > 0 && hv > 0 && hq % hk == 0 && hq % hv == 0, ShapeError, kOp,
             ": with enable_gqa the number of heads in key and value must divide the number of heads in query, got ", hq, " query heads, ", hk,
             " key heads and ", hv, " value heads (", shapes_of(q, k, v), ")");
    g.group_k = hq / hk;
    g.group_v = hq / hv;
    kb.back() = hq;
    vb.back() = hq;
  }
  // The leading dims broadcast as torch.matmul's batch dims.
  const IntArrayRef qb = leading(q);
  const size_t nd = std::max({qb.size(), kb.size(), vb.size()});
  g.batch = Shape(nd, 1);
  for (const IntArrayRef b : {qb, IntArrayRef(kb), IntArrayRef(vb)}) {
    for (size_t i = 0; i < b.size(); ++i) {
      int64_t& out = g.batch[nd - b.size() + i];
      const int64_t s = b[i];
      DP_CHECK(s == out || s == 1 || out == 1, ShapeError, kOp, ": the leading (batch and head) dims of ", shapes_of(q, k, v), " do not broadcast",
               gqa ? " (key and value heads repeated for enable_gqa)" : "");
      if (out == 1) out = s;
    }
  }
  g.problems = 1;
  for (int64_t s : g.batch) g.problems *= s;

  if (mask.defined()) {
    const DType md = mask.dtype();
    DP_CHECK(md == kBool || md == kFloat32 || md == q.dtype(), DTypeError, kOp,
             ": expected attn_mask dtype to be bool or float or to match query dtype, got attn_mask of dtype ", dtype_name(md),
             " and query of dtype ", dtype_name(q.dtype()));
    Shape weights = g.batch;
    weights.push_back(g.L);
    weights.push_back(g.S);
    bool ok = mask.dim() <= static_cast<int64_t>(weights.size());
    for (int64_t i = 0; ok && i < mask.dim(); ++i) {
      const int64_t s = mask.size(mask.dim() - 1 - i), w = weights[weights.size() - 1 - static_cast<size_t>(i)];
      ok = s == w || s == 1;
    }
    DP_CHECK(ok, ShapeError, kOp, ": attn_mask of shape ", mask.size_str(), " does not broadcast to the attention weights' shape ",
             shape_str(weights), " ([N..., L, S] for ", shapes_of(q, k, v), ")");
  }
  g.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(g.E));
  return g;
}

// ---------------------------------------------------------------------------------------------
// The exact path, composed of differentiable ops.

// k [..., H, S, E] -> [..., H * group, S, E], each head repeated `group` times in a row (as
// repeat_interleave(group, -3)).
Tensor repeat_heads(const Tensor& t, int64_t group) {
  if (group == 1) return t;
  Shape sizes = t.sizes();
  Tensor x = dp::unsqueeze(t, -3);
  Shape expanded = x.sizes();
  expanded[expanded.size() - 3] = group;
  x = dp::expand(x, expanded);
  sizes[sizes.size() - 3] *= group;
  return dp::reshape(x, sizes);
}

// The attention weights softmax(q k^T * scale + bias), fully masked rows zero. q, k (heads already
// repeated) in one floating dtype; a float mask is converted to it.
Tensor exact_weights(const Tensor& q, const Tensor& k, const Tensor& mask, bool causal, double scale) {
  Tensor x = dp::matmul(dp::mul(q, scale), dp::transpose(k, -2, -1));
  const int64_t L = q.size(-2), S = k.size(-2);
  if (S == 0) return dp::mul(x, 0.0);  // no keys: the output is zero
  const double inf = std::numeric_limits<double>::infinity();
  if (causal) {
    const TensorOptions idx = TensorOptions(kInt64).device(q.device());
    Tensor above = dp::lt(dp::unsqueeze(dp::arange(L, idx), 1), dp::unsqueeze(dp::arange(S, idx), 0));  // key j > query i
    return dp::softmax(dp::masked_fill(x, above, -inf), -1);                                            // key 0 is visible to every row
  }
  if (!mask.defined()) return dp::softmax(x, -1);
  if (mask.dtype() == kBool)
    x = dp::masked_fill(x, dp::logical_not(mask), -inf);
  else
    x = dp::add(x, mask.dtype() == x.dtype() ? mask : mask.to(x.dtype()));
  // PyTorch's _safe_softmax: a row with every score -inf gives zeros (softmax alone: NaN). The
  // row is softmaxed with its scores replaced by 0 (finite) and the result zeroed, so its
  // gradient is zero too.
  Tensor dead;
  {
    NoGradGuard no_grad;
    dead = dp::eq(dp::amax(x, {-1}, true), -inf);
  }
  return dp::masked_fill(dp::softmax(dp::masked_fill(x, dead, 0.0), -1), dead, 0.0);
}

// The dtype the exact path computes in: CPU kernels for 16-bit floats are missing or slow, so
// bfloat16/float16 CPU inputs are computed in float32 (as PyTorch's CPU math path upcasts).
DType exact_dtype(const Tensor& q) { return q.is_cpu() && is_half(q.dtype()) ? kFloat32 : q.dtype(); }

Tensor cast(const Tensor& t, DType dt) { return !t.defined() || t.dtype() == dt || t.dtype() == kBool ? t : t.to(dt); }

Tensor exact_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p, bool causal, const Geometry& g) {
  const DType dt = exact_dtype(q);
  Tensor p = exact_weights(cast(q, dt), repeat_heads(cast(k, dt), g.group_k), cast(mask, dt), causal, g.scale);
  if (dropout_p > 0.0) p = dp::dropout(p, dropout_p, /*training=*/true);
  Tensor out = dp::matmul(p, repeat_heads(cast(v, dt), g.group_v));
  return cast(out, q.dtype());
}

// A gradient computed per problem (shape batch + [X, Y]) summed down to an operand's shape: over
// the repeated heads (group > 1: dim -3 is heads * group), then over broadcast dims.
Tensor reduce_grad(Tensor full, const Shape& sizes, int64_t group) {
  if (group > 1) {
    Shape split = full.sizes();
    const size_t h = split.size() - 3;
    const int64_t heads = split[h] / group;
    split[h] = heads;
    split.insert(split.begin() + static_cast<std::ptrdiff_t>(h) + 1, group);
    full = dp::sum(dp::reshape(full, split), {static_cast<int64_t>(h) + 1});
  }
  return dp::sum_to(full, sizes);
}

// The gradients of the exact path's forward, written with ops (differentiable again): used by the
// fused node's backward under create_graph. needs: q, k, v, mask.
variable_list exact_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                             const Geometry& g, const std::array<bool, 4>& needs) {
  const DType dt = exact_dtype(q);
  const Tensor qw = cast(q, dt), kx = repeat_heads(cast(k, dt), g.group_k), vx = repeat_heads(cast(v, dt), g.group_v);
  const Tensor p = exact_weights(qw, kx, cast(mask, dt), causal, g.scale);
  const Tensor go = cast(grad, dt);
  variable_list out(4);
  if (needs[2]) out[2] = cast(reduce_grad(dp::matmul(dp::transpose(p, -2, -1), go), v.sizes(), g.group_v), v.dtype());
  if (!(needs[0] || needs[1] || needs[3])) return out;
  const Tensor dp_ = dp::matmul(go, dp::transpose(vx, -2, -1));
  const Tensor ds = dp::mul(p, dp::sub(dp_, dp::sum(dp::mul(p, dp_), {-1}, true)));
  if (needs[0]) out[0] = cast(dp::sum_to(dp::mul(dp::matmul(ds, kx), g.scale), q.sizes()), q.dtype());
  if (needs[1]) out[1] = cast(reduce_grad(dp::mul(dp::matmul(dp::transpose(ds, -2, -1), qw), g.scale), k.sizes(), g.group_k), k.dtype());
  if (needs[3]) out[3] = cast(dp::sum_to(ds, mask.sizes()), mask.dtype());
  return out;
}

// ---------------------------------------------------------------------------------------------
// The fused path.

// Offsets (in elements from data_ptr) of each problem's matrix in t, whose leading dims broadcast
// to `batch` (right-aligned; size 1 or missing: stride 0). `group` > 1: the last leading dim
// (heads) is indexed by the output's head index / group.
std::vector<int64_t> problem_offsets(const Shape& batch, int64_t problems, IntArrayRef sizes, IntArrayRef strides, size_t t_lead, int64_t group) {
  const size_t nd = batch.size();
  std::vector<int64_t> stride(nd, 0), div(nd, 1);
  for (size_t d = 0; d < nd; ++d) {
    if (d + t_lead < nd) continue;  // missing in t
    const size_t td = d + t_lead - nd;
    stride[d] = sizes[td] == 1 && batch[d] != 1 ? 0 : strides[td];
    if (d + 1 == nd) div[d] = group;
  }
  std::vector<int64_t> offsets(static_cast<size_t>(problems));
  std::vector<int64_t> idx(nd, 0);
  for (int64_t p = 0; p < problems; ++p) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] / div[d] * stride[d];
    offsets[static_cast<size_t>(p)] = off;
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return offsets;
}

// An operand as the kernel reads it: in `dt`, columns contiguous, rows at least a row apart
// (otherwise a contiguous copy).
backend::AttnOperand operand(const Tensor& t, DType dt, const Geometry& g, int64_t group) {
  Tensor x = backend::convert_nograd(t, dt);
  const int64_t rows = x.size(-2), cols = x.size(-1);
  if ((cols > 1 && x.stride(-1) != 1) || (rows > 1 && x.stride(-2) < cols)) x = backend::contiguous_nograd(x);
  backend::AttnOperand o;
  o.row_stride = rows > 1 ? x.stride(-2) : std::max<int64_t>(cols, 1);
  o.offsets = problem_offsets(g.batch, g.problems, x.sizes(), x.strides(), static_cast<size_t>(x.dim() - 2), group);
  o.t = x;
  return o;
}

backend::AttnMask mask_operand(const Tensor& mask, DType dt, const Geometry& g) {
  backend::AttnMask m;
  if (!mask.defined()) return m;
  Tensor x = mask.dtype() == kBool ? mask : backend::convert_nograd(mask, dt);
  // As a tensor of at least 2 dims (missing leading dims: size 1).
  Shape sizes = x.sizes(), strides = x.strides();
  while (sizes.size() < 2) {
    sizes.insert(sizes.begin(), 1);
    strides.insert(strides.begin(), 0);
  }
  const size_t n = sizes.size();
  m.row_stride = sizes[n - 2] == 1 ? 0 : strides[n - 2];
  m.col_stride = sizes[n - 1] == 1 ? 0 : strides[n - 1];
  m.offsets = problem_offsets(g.batch, g.problems, sizes, strides, n - 2, 1);
  m.t = x;
  return m;
}

// A new tensor of shape batch + [rows, cols], laid out [batch[:-1]..., rows, heads, cols] in memory
// (heads = batch's last dim) when heads_inner (the output, as PyTorch's CPU flash kernel lays it
// out), else contiguous.
Tensor empty_problems(const Geometry& g, int64_t rows, int64_t cols, DType dt, Device dev, bool heads_inner) {
  const size_t nd = g.batch.size();
  Shape logical = g.batch;
  logical.push_back(rows);
  logical.push_back(cols);
  if (nd == 0 || !heads_inner) return make_empty(logical, dt, dev);
  Shape physical(g.batch.begin(), g.batch.end() - 1);
  physical.push_back(rows);
  physical.push_back(g.batch.back());
  physical.push_back(cols);
  Tensor t = make_empty(physical, dt, dev);
  const Shape ps = contiguous_strides(physical);
  Shape strides(ps.begin(), ps.begin() + static_cast<std::ptrdiff_t>(nd) - 1);
  strides.push_back(ps[nd]);      // heads
  strides.push_back(ps[nd - 1]);  // rows
  strides.push_back(1);
  return backend::restride_nograd(t, logical, strides);
}

backend::AttentionShape kernel_shape(const Geometry& g, bool causal) {
  backend::AttentionShape s;
  s.batch = g.problems;
  s.L = g.L;
  s.S = g.S;
  s.E = g.E;
  s.Ev = g.Ev;
  s.scale = g.scale;
  s.causal = causal;
  s.block_q = t_block_q;
  s.block_k = t_block_k;
  return s;
}

// What the fused node keeps for backward.
struct FusedSaved {
  Geometry g;
  backend::AttentionShape shape;
  DType compute;
  SavedVariable q, k, v, mask, out;
  Tensor lse;  // private
  std::array<bool, 4> needs{};
};

variable_list fused_backward(const FusedSaved& s, const Tensor& grad) {
  const Tensor q = s.q.unpack(), k = s.k.unpack(), v = s.v.unpack(), mask = s.mask.unpack(), out = s.out.unpack();
  if (GradMode::is_enabled()) return exact_backward(grad, q, k, v, mask, s.shape.causal, s.g, s.needs);
  const Device dev = q.device();
  const DType dt = s.compute;
  backend::AttentionBackwardArgs a;
  a.shape = s.shape;
  a.q = operand(q, dt, s.g, 1);
  a.k = operand(k, dt, s.g, s.g.group_k);
  a.v = operand(v, dt, s.g, s.g.group_v);
  a.out = operand(out, dt, s.g, 1);
  a.dout = operand(grad, dt, s.g, 1);
  a.mask = mask_operand(mask, dt, s.g);
  a.lse = s.lse;
  // Per-problem gradients of q, k, v (reduced below where operands broadcast or heads repeat).
  // A gradient takes its input's layout where it can (heads inside rows, as in MultiheadAttention's
  // transposed views, or contiguous), so that it needs no copy after the op.
  auto full = [&](bool need, const Tensor& input, int64_t rows, int64_t cols) {
    backend::AttnOperand o;
    if (!need) return o;
    const bool heads_inner = input.dim() >= 3 && input.size(-3) > 1 && input.stride(-3) < input.stride(-2);
    o.t = empty_problems(s.g, rows, cols, dt, dev, heads_inner);
    o.row_stride = rows > 1 ? o.t.stride(-2) : std::max<int64_t>(cols, 1);
    o.offsets = problem_offsets(s.g.batch, s.g.problems, o.t.sizes(), o.t.strides(), s.g.batch.size(), 1);
    return o;
  };
  a.dq = full(s.needs[0], q, s.g.L, s.g.E);
  a.dk = full(s.needs[1], k, s.g.S, s.g.E);
  a.dv = full(s.needs[2], v, s.g.S, s.g.Ev);
  if (s.needs[3]) a.dmask = make_empty({s.g.problems, s.g.L, s.g.S}, dt, dev);
  backend::attention_backward_kernel(dev.type, a);

  variable_list grads(4);
  if (s.needs[0]) grads[0] = backend::convert_nograd(dp::sum_to(a.dq.t, q.sizes()), q.dtype());
  if (s.needs[1]) grads[1] = backend::convert_nograd(reduce_grad(a.dk.t, k.sizes(), s.g.group_k), k.dtype());
  if (s.needs[2]) grads[2] = backend::convert_nograd(reduce_grad(a.dv.t, v.sizes(), s.g.group_v), v.dtype());
  if (s.needs[3]) {
    Shape weights = s.g.batch;
    weights.push_back(s.g.L);
    weights.push_back(s.g.S);
    grads[3] = backend::convert_nograd(dp::sum_to(dp::reshape(a.dmask, weights), mask.sizes()), mask.dtype());
  }
  return grads;
}

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal, const Geometry& g) {
  const DType dt = is_half(q.dtype()) ? kFloat32 : q.dtype();
  const Device dev = q.device();
  backend::AttentionForwardArgs a;
  a.shape = kernel_shape(g, causal);
  a.q = operand(q, dt, g, 1);
  a.k = operand(k, dt, g, g.group_k);
  a.v = operand(v, dt, g, g.group_v);
  a.mask = mask_operand(mask, dt, g);
  a.out.t = empty_problems(g, g.L, g.Ev, dt, dev, /*heads_inner=*/true);
  a.out.row_stride = g.L > 1 ? a.out.t.stride(-2) : std::max<int64_t>(g.Ev, 1);
  a.out.offsets = problem_offsets(g.batch, g.problems, a.out.t.sizes(), a.out.t.strides(), g.batch.size(), 1);
  a.lse = make_empty({g.problems, g.L}, dt, dev);
  backend::attention_forward_kernel(dev.type, a);
  Tensor out = backend::convert_nograd(a.out.t, q.dtype());

  const bool mask_grad = mask.defined() && mask.dtype() != kBool && autograd::needs_grad(mask);
  if (autograd::needs_grad(q, k, v) || mask_grad) {
    auto s = std::make_shared<FusedSaved>();
    s->g = g;
    s->shape = a.shape;
    s->compute = dt;
    s->q = SavedVariable(q, false);
    s->k = SavedVariable(k, false);
    s->v = SavedVariable(v, false);
    if (mask.defined()) s->mask = SavedVariable(mask, false);
    s->lse = a.lse;
    s->needs = {autograd::needs_grad(q), autograd::needs_grad(k), autograd::needs_grad(v), mask_grad};
    autograd::record("ScaledDotProductFlashAttentionForCpuBackward0", {q, k, v, mask_grad ? mask : Tensor()}, {out},
                     [s](variable_list&& grads) { return fused_backward(*s, grads[0]); });
    // Saved after record() so that it knows it is the node's output 0.
    s->out = SavedVariable(out, true);
  }
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask, double dropout_p,
                                    bool is_causal, std::optional<double> scale, bool enable_gqa) {
  const Geometry g = check_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  const bool cpu = query.device().type == DeviceType::CPU;
  const char* why_not_fused = !cpu ? "the fused kernel runs on the CPU only" : dropout_p > 0.0 ? "dropout_p > 0 needs the exact path" : nullptr;
  bool fused = why_not_fused == nullptr;
  if (t_backend == static_cast<int>(SDPBackend::flash_attention)) {
    DP_CHECK(fused, NotImplementedError, kOp, ": the flash_attention backend chosen by SDPAKernelGuard cannot run this call: ", why_not_fused, " (",
             shapes_of(query, key, value), " on ", query.device().str(), ")");
  } else if (t_backend == static_cast<int>(SDPBackend::math)) {
    fused = false;
  }
  // Automatic choice: short sequences without a mask or causal masking take the exact path, whose
  // backward reuses the stored weights instead of recomputing them (4 GEMMs instead of 5):
  // measured 15-20% faster forward+backward at L = S = 32 to 128 (B = 4, H = 12, d = 64), the
  // forward equal. With a mask or causal the fused kernel is faster there too (measured at T = 64
  // and 128: 1.4 to 2.7 times with a bool mask, 1.4 times causal), and at L = S = 256 the two were
  // equal without a mask.
  if (fused && t_backend < 0 && !is_causal && !attn_mask.defined() && g.L <= kShortExact && g.S <= kShortExact) fused = false;
  if (fused) return fused_attention(query, key, value, attn_mask, is_causal, g);
  return exact_attention(query, key, value, attn_mask, dropout_p, is_causal, g);
}

SDPAKernelGuard::SDPAKernelGuard(SDPBackend backend) : previous_(t_backend) { t_backend = static_cast<int>(backend); }
SDPAKernelGuard::~SDPAKernelGuard() { t_backend = previous_; }

namespace detail {

SdpaTilesGuard::SdpaTilesGuard(int64_t bq, int64_t bk) : prev_q_(t_block_q), prev_k_(t_block_k) {
  t_block_q = bq;
  t_block_k = bk;
}
SdpaTilesGuard::~SdpaTilesGuard() {
  t_block_q = prev_q_;
  t_block_k = prev_k_;
}

}  // namespace detail
}  // namespace dp
