// einsum and baddbmm: products written with the matrix-product kernels and differentiable ops.
//
// einsum contracts its operands left to right, two at a time, each pair with one batched GEMM:
// the subscripts of a pair are sorted into batch (in both and still needed), contracted (in both,
// no longer needed), left-only and right-only; the operands are permuted to [batch, left,
// contracted] and [batch, contracted, right] (views), reshaped to three dims (a view when the
// strides allow, else one copy) and multiplied with bmm/mm; a subscript that no later operand and
// not the output uses is summed out of its operand first. Pairs without a contracted subscript
// (outer products, element-wise products) are a broadcast multiply instead, and pairs whose
// left and right parts are empty a multiply and a sum, not a GEMM of 1x1 matrices. Everything is
// made of dp ops (permute, reshape, sum, mul, bmm), so einsum runs wherever they do and is
// differentiable through them.
#include "dp/ops/sequence.h"

#include <algorithm>
#include <string>
#include <vector>

#include "amp/autocast_ops.h"
#include "backend/copy_kernels.h"
#include "backend/linalg_kernels.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/linalg.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/common.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

// ---------------------------------------------------------------------------------------------
// einsum

constexpr int kLetters = 52;  // 'A'..'Z' -> 0..25, 'a'..'z' -> 26..51 (ASCII order); ellipsis dims from 52

int letter_label(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  return -1;
}

std::string label_name(int l) {
  if (l < 26) return std::string(1, static_cast<char>('A' + l));
  if (l < kLetters) return std::string(1, static_cast<char>('a' + l - 26));
  return detail::str("... dim ", l - kLetters);
}

// One operand's (or the output's) subscripts: the letters in order, and where "..." stands among
// them (-1: none).
struct Subscripts {
  std::vector<int> letters;
  int ellipsis_at = -1;
  std::string text;
};

// A tensor and the label of each of its dims.
struct Labeled {
  Tensor t;
  std::vector<int> labels;
};

class Equation {
 public:
  Equation(const std::string& equation, const TensorList& operands) : eq_(equation) { parse(operands); }

  Tensor run(const TensorList& operands) const;

 private:
  template <typename... Parts>
  [[noreturn]] void fail_shape(const Parts&... parts) const {
    throw ShapeError(detail::str("einsum(\"", eq_, "\"): ", parts...));
  }
  template <typename... Parts>
  [[noreturn]] void fail_value(const Parts&... parts) const {
    throw ValueError(detail::str("einsum(\"", eq_, "\"): ", parts...));
  }

  Subscripts parse_term(const std::string& s, const std::string& what) const;
  void parse(const TensorList& operands);
  // Whether the output or one of the operands xs[next..] uses `label`.
  bool used_later(int label, const std::vector<Labeled>& xs, size_t next) const;
  // Sums out of x the labels that neither the output nor xs[next..] nor `other` uses.
  Labeled reduce_unused(Labeled x, const std::vector<Labeled>& xs, size_t next, const std::vector<int>& other) const;
  // The product of a and b over their common labels (xs[next..] still to come).
  Labeled contract(const Labeled& a, const Labeled& b, const std::vector<Labeled>& xs, size_t next) const;

  std::string eq_;
  std::vector<Subscripts> inputs_;
  std::vector<std::vector<int>> labels_;  // each operand's label per dim (ellipsis dims numbered from kLetters)
  std::vector<int> size_from_;            // the operand that gave each label its size (for messages)
  std::vector<int> output_;               // the output's labels in order
  std::vector<int64_t> size_;             // each label's size (1 when every operand has it as 1)
};

Subscripts Equation::parse_term(const std::string& s, const std::string& what) const {
  Subscripts sub;
  sub.text = s;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      if (s.compare(i, 3, "...") != 0) fail_value(what, " (\"", s, "\") has a '.' that is not part of an ellipsis \"...\"");
      if (sub.ellipsis_at >= 0) fail_value(what, " (\"", s, "\") has more than one ellipsis \"...\"");
      sub.ellipsis_at = static_cast<int>(sub.letters.size());
      i += 2;
      continue;
    }
    const int l = letter_label(c);
    if (l < 0) fail_value(what, " (\"", s, "\") has the invalid subscript '", std::string(1, c), "' (subscripts are letters a-z, A-Z and \"...\")");
    sub.letters.push_back(l);
  }
  return sub;
}

void Equation::parse(const TensorList& operands) {
  std::string eq;
  for (char c : eq_)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  if (arrow != std::string::npos && eq.find("->", arrow + 2) != std::string::npos) fail_value("more than one \"->\"");
  // Operand terms, split at the commas.
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != operands.size())
    fail_value("the equation has ", terms.size(), " operand", terms.size() == 1 ? "" : "s", " but ", operands.size(), " tensor",
               operands.size() == 1 ? " was" : "s were", " given");
  // Each operand's dims: letters and ellipsis dims, checked against its rank.
  int64_t ellipsis_dims = 0;
  std::vector<int64_t> own_ellipsis(terms.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string what = detail::str("operand ", i);
    Subscripts sub = parse_term(terms[i], what);
    const int64_t nd = operands[i].dim(), nl = static_cast<int64_t>(sub.letters.size());
    if (sub.ellipsis_at < 0 && nd != nl)
      fail_shape("operand ", i, " has ", nd, " dimension", nd == 1 ? "" : "s", " (shape ", operands[i].size_str(), ") but its subscripts \"",
                 sub.text, "\" name ", nl);
    if (sub.ellipsis_at >= 0 && nd < nl)
      fail_shape("operand ", i, " has ", nd, " dimension", nd == 1 ? "" : "s", " (shape ", operands[i].size_str(), ") but its subscripts \"",
                 sub.text, "\" name at least ", nl);
    for (size_t a = 0; a < sub.letters.size(); ++a)
      for (size_t b = a + 1; b < sub.letters.size(); ++b)
        if (sub.letters[a] == sub.letters[b])
          throw NotImplementedError(detail::str("einsum(\"", eq_, "\"): operand ", i, " (\"", sub.text, "\") repeats the subscript '",
                                                label_name(sub.letters[a]), "' (a diagonal), which is not supported"));
    own_ellipsis[i] = sub.ellipsis_at >= 0 ? nd - nl : 0;
    ellipsis_dims = std::max(ellipsis_dims, own_ellipsis[i]);
    inputs_.push_back(std::move(sub));
  }
  // Labels per dim: an operand's e ellipsis dims are the last e of all ellipsis_dims (right-aligned,
  // as broadcasting aligns them).
  size_.assign(static_cast<size_t>(kLetters + ellipsis_dims), -1);
  size_from_.assign(size_.size(), -1);
  std::vector<int> count(size_.size(), 0);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Subscripts& sub = inputs_[i];
    std::vector<int> labels;
    for (size_t p = 0; p <= sub.letters.size(); ++p) {
      if (static_cast<int>(p) == sub.ellipsis_at)
        for (int64_t t = 0; t < own_ellipsis[i]; ++t) labels.push_back(static_cast<int>(kLetters + ellipsis_dims - own_ellipsis[i] + t));
      if (p < sub.letters.size()) labels.push_back(sub.letters[p]);
    }
    for (size_t d = 0; d < labels.size(); ++d) {
      const int l = labels[d];
      const int64_t s = operands[i].size(static_cast<int64_t>(d));
      ++count[l];
      if (size_[l] == -1 || size_[l] == 1) {
        size_[l] = s;
        size_from_[l] = static_cast<int>(i);
      } else if (s != 1 && s != size_[l]) {
        const int j = size_from_[l];
        fail_shape("subscript '", label_name(l), "' has size ", size_[l], " in operand ", j, " (shape ", operands[j].size_str(), ") but size ", s,
                   " in operand ", i, " (shape ", operands[i].size_str(), "); sizes must match or be 1");
      }
    }
    labels_.push_back(std::move(labels));
  }
  // The output: explicit, or NumPy's implicit rule (the ellipsis dims, then the letters that occur
  // exactly once, in alphabetical order, upper case first).
  if (arrow != std::string::npos) {
    Subscripts out = parse_term(eq.substr(arrow + 2), "the output");
    for (size_t p = 0; p <= out.letters.size(); ++p) {
      if (static_cast<int>(p) == out.ellipsis_at)
        for (int64_t t = 0; t < ellipsis_dims; ++t) output_.push_back(static_cast<int>(kLetters + t));
      if (p < out.letters.size()) {
        const int l = out.letters[p];
        if (count[l] == 0) fail_value("the output subscript '", label_name(l), "' does not occur in any operand");
        if (std::find(output_.begin(), output_.end(), l) != output_.end())
          fail_value("the output subscript '", label_name(l), "' occurs more than once in the output");
        output_.push_back(l);
      }
    }
  } else {
    for (int64_t t = 0; t < ellipsis_dims; ++t) output_.push_back(static_cast<int>(kLetters + t));
    for (int l = 0; l < kLetters; ++l)
      if (count[l] == 1) output_.push_back(l);
  }
}

bool Equation::used_later(int label, const std::vector<Labeled>& xs, size_t next) const {
  if (std::find(output_.begin(), output_.end(), label) != output_.end()) return true;
  for (size_t j = next; j < xs.size(); ++j)
    if (std::find(xs[j].labels.begin(), xs[j].labels.end(), label) != xs[j].labels.end()) return true;
  return false;
}

Labeled Equation::reduce_unused(Labeled x, const std::vector<Labeled>& xs, size_t next, const std::vector<int>& other) const {
  std::vector<int64_t> dims;
  std::vector<int> kept;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    const int l = x.labels[d];
    if (used_later(l, xs, next) || std::find(other.begin(), other.end(), l) != other.end())
      kept.push_back(l);
    else
      dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return x;
  return Labeled{dp::sum(x.t, dims, false), kept};
}

// Drops the dims whose size is 1 while their label's size is not (they broadcast): the operand
// does not depend on that label.
Labeled squeeze_broadcast(Labeled x, const std::vector<int64_t>& size) {
  Shape keep_shape;
  std::vector<int> kept;
  bool any = false;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (x.t.size(static_cast<int64_t>(d)) == 1 && size[x.labels[d]] != 1) {
      any = true;
      continue;
    }
    kept.push_back(x.labels[d]);
    keep_shape.push_back(x.t.size(static_cast<int64_t>(d)));
  }
  if (!any) return x;
  return Labeled{dp::reshape(x.t, keep_shape), kept};
}

Labeled Equation::contract(const Labeled& a, const Labeled& b, const std::vector<Labeled>& xs, size_t next) const {
  auto in = [](const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); };
  std::vector<int> batch, left, contracted, right;
  for (int l : a.labels) {
    if (!in(b.labels, l))
      left.push_back(l);
    else if (used_later(l, xs, next))
      batch.push_back(l);
    else
      contracted.push_back(l);
  }
  for (int l : b.labels)
    if (!in(a.labels, l)) right.push_back(l);
  auto dims_of = [](const Labeled& x, std::initializer_list<const std::vector<int>*> groups) {
    Shape perm;
    for (const std::vector<int>* g : groups)
      for (int l : *g) perm.push_back(std::find(x.labels.begin(), x.labels.end(), l) - x.labels.begin());
    return perm;
  };
  auto prod = [&](const std::vector<int>& g) {
    int64_t p = 1;
    for (int l : g) p *= size_[l];
    return p;
  };
  const int64_t B = prod(batch), M = prod(left), K = prod(contracted), N = prod(right);
  const Tensor A3 = dp::reshape(dp::permute(a.t, dims_of(a, {&batch, &left, &contracted})), {B, M, K});
  const Tensor B3 = dp::reshape(dp::permute(b.t, dims_of(b, {&batch, &contracted, &right})), {B, K, N});
  Tensor C3;
  if (contracted.empty()) {  // no sum: a broadcast product [B, M, 1] * [B, 1, N]
    C3 = dp::mul(A3, B3);
  } else if (M == 1 && N == 1) {  // one dot product per batch entry
    C3 = dp::sum(dp::mul(A3, dp::transpose(B3, 1, 2)), {2}, true);
  } else if (B == 1) {
    C3 = dp::unsqueeze(dp::mm(dp::select(A3, 0, 0), dp::select(B3, 0, 0)), 0);
  } else {
    C3 = dp::bmm(A3, B3);
  }
  Labeled c;
  Shape c_shape;
  for (const std::vector<int>* g : {&batch, &left, &right})
    for (int l : *g) {
      c.labels.push_back(l);
      c_shape.push_back(size_[l]);
    }
  c.t = dp::reshape(C3, c_shape);
  return c;
}

Tensor Equation::run(const TensorList& operands) const {
  std::vector<Labeled> xs;
  for (size_t i = 0; i < operands.size(); ++i) xs.push_back(squeeze_broadcast(Labeled{operands[i], labels_[i]}, size_));
  Labeled cur = reduce_unused(xs[0], xs, 1, {});
  for (size_t i = 1; i < xs.size(); ++i) cur = contract(cur, reduce_unused(xs[i], xs, i + 1, cur.labels), xs, i + 1);
  // The output order (every output label is in cur: each came from an operand and stays needed).
  Shape perm;
  for (int l : output_) perm.push_back(std::find(cur.labels.begin(), cur.labels.end(), l) - cur.labels.begin());
  bool identity = !cur.t.is_same(operands[0]);  // an operand passed through: a view of it, as PyTorch
  for (size_t d = 0; d < perm.size(); ++d) identity = identity && perm[d] == static_cast<int64_t>(d);
  return identity ? cur.t : dp::permute(cur.t, perm);
}

// ---------------------------------------------------------------------------------------------
// baddbmm

bool is_zero(const Scalar& s) { return s.to_double() == 0.0 && (s.is_floating_point() || s.to_int() == 0); }
bool is_one(const Scalar& s) { return s.is_floating_point() ? s.to_double() == 1.0 : s.to_int() == 1; }
Tensor scaled(const Tensor& t, const Scalar& s) { return is_one(s) ? t : dp::mul(t, s); }

// Whether `sizes` broadcasts to `target` (without growing it).
bool broadcasts_to(IntArrayRef sizes, IntArrayRef target) {
  if (sizes.size() > target.size()) return false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t s = sizes[sizes.size() - 1 - i], t = target[target.size() - 1 - i];
    if (s != t && s != 1) return false;
  }
  return true;
}

}  // namespace

// -----------------------------------------------------------------------------------------------

Tensor einsum(const std::string& equation, const TensorList& operands) {
  DP_CHECK(!operands.empty(), ValueError, "einsum(\"", equation, "\"): must provide at least one operand");
  for (size_t i = 0; i < operands.size(); ++i)
    DP_CHECK(operands[i].defined(), ValueError, "einsum(\"", equation, "\"): operand ", i, " is an undefined tensor");
  for (size_t i = 1; i < operands.size(); ++i) {
    DP_CHECK(operands[i].device() == operands[0].device(), DeviceError, "einsum(\"", equation,
             "\"): expected all operands to be on the same device, but operand 0 is on ", operands[0].device().str(), " and operand ", i, " on ",
             operands[i].device().str());
    DP_CHECK(operands[i].dtype() == operands[0].dtype(), DTypeError, "einsum(\"", equation,
             "\"): expected all operands to have the same dtype, but operand 0 is ", dtype_name(operands[0].dtype()), " and operand ", i, " is ",
             dtype_name(operands[i].dtype()));
  }
  return Equation(equation, operands).run(operands);
}

Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, const Scalar& beta, const Scalar& alpha) {
  if (autocast::detail::Cast ac{autocast::detail::Op::baddbmm, {&self, &batch1, &batch2}})
    return ac([&] { return dp::baddbmm(ac[0], ac[1], ac[2], beta, alpha); });
  const char* op = "baddbmm";
  ops::check_defined(op, self, "self");
  ops::check_defined(op, batch1, "batch1");
  ops::check_defined(op, batch2, "batch2");
  ops::check_same_device(op, {&self, &batch1, &batch2});
  DP_CHECK(batch1.dim() == 3, ShapeError, "baddbmm: batch1 must be a 3D tensor, got a ", batch1.dim(), "-D tensor of shape ", batch1.size_str());
  DP_CHECK(batch2.dim() == 3, ShapeError, "baddbmm: batch2 must be a 3D tensor, got a ", batch2.dim(), "-D tensor of shape ", batch2.size_str());
  DP_CHECK(batch2.size(0) == batch1.size(0) && batch2.size(1) == batch1.size(2), ShapeError,
           "baddbmm: Expected size for first two dimensions of batch2 tensor to be: [", batch1.size(0), ", ", batch1.size(2), "] but got: [",
           batch2.size(0), ", ", batch2.size(1), "] (batch1 ", batch1.size_str(), ", batch2 ", batch2.size_str(), ")");
  DP_CHECK(self.dtype() == batch1.dtype() && batch1.dtype() == batch2.dtype(), DTypeError,
           "baddbmm: expected self, batch1 and batch2 to have the same dtype, but got ", dtype_name(self.dtype()), ", ", dtype_name(batch1.dtype()),
           " and ", dtype_name(batch2.dtype()));
  DP_CHECK(self.dtype() != kBool, DTypeError, "baddbmm: not implemented for 'Bool' tensors");
  if (!is_floating_point(self.dtype())) {
    DP_CHECK(!beta.is_floating_point(), ValueError, "baddbmm: for integral input tensors, argument beta must not be a floating point number.");
    DP_CHECK(!alpha.is_floating_point(), ValueError, "baddbmm: for integral input tensors, argument alpha must not be a floating point number.");
  }
  const Shape out_shape{batch1.size(0), batch1.size(1), batch2.size(2)};
  DP_CHECK(broadcasts_to(self.sizes(), out_shape), ShapeError, "baddbmm: self of shape ", self.size_str(),
           " cannot be broadcast to the result shape ", shape_str(out_shape));
  Tensor out = make_empty(out_shape, self.dtype(), self.device());
  // One batched GEMM onto self broadcast into the output; beta == 0 ignores self (NaN and inf in it
  // do not propagate), as PyTorch.
  const bool use_self = !is_zero(beta);
  if (use_self) backend::copy_kernel(backend::copy_device_type(out, self), out, self);
  backend::matmul_kernel(out.device().type, out, batch1, batch2, alpha, use_self ? beta : Scalar(0), op, true);
  const bool gs = autograd::needs_grad(self), g1 = autograd::needs_grad(batch1), g2 = autograd::needs_grad(batch2);
  if (gs || g1 || g2) {
    SavedVariable s1 = g2 ? SavedVariable(batch1, false) : SavedVariable();
    SavedVariable s2 = g1 ? SavedVariable(batch2, false) : SavedVariable();
    Shape self_shape = self.sizes();
    autograd::record("BaddbmmBackward0", {self, batch1, batch2}, {out}, [s1, s2, gs, g1, g2, beta, alpha, self_shape](variable_list&& g) {
      Tensor ds = gs ? scaled(dp::sum_to(g[0], self_shape), beta) : Tensor();
      Tensor d1 = g1 ? scaled(dp::bmm(g[0], dp::transpose(s2.unpack(), 1, 2)), alpha) : Tensor();
      Tensor d2 = g2 ? scaled(dp::bmm(dp::transpose(s1.unpack(), 1, 2), g[0]), alpha) : Tensor();
      return variable_list{ds, d1, d2};
    });
  }
  return out;
}

}  // namespace dp
