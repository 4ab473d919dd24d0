// Matrix products: mm, bmm, addmm, matmul, linear, dot, outer.
//
// Every product ends in one kernel of backend/linalg_kernels.h: matmul_kernel(C, A, B, alpha, beta):
// C [*batch, m, n] (fresh, contiguous) = alpha * A @ B + beta * C, where A [*ba, m, k] and
// B [*bb, k, n] have batch dims that broadcast to `batch`; Linear and addmm with alpha = beta = 1
// call matmul_bias_kernel (on CUDA the bias added by the GEMM's epilogue); dot and outer have
// kernels of their own. The CPU backend (src/backend/cpu/linalg.cpp) runs OpenBLAS for
// float32/float64, float32 for the 16-bit floats and reference loops for integers; the CUDA
// backend (src/backend/cuda/blas.h) cuBLAS, float32/float64/float16/bfloat16 only, as PyTorch's CUDA
// products. Linear first offers its operands to linear_forward_kernel / linear_backward_kernel, a
// backend's direct path (the CPU's: float32/float64 straight to OpenBLAS, no w.t() view).
// Backward formulas are written with dp ops, so they are differentiable again.
#include "dp/core/pooled.h"
#include "dp/ops/linalg.h"

#include <optional>
#include <sstream>

#include "backend/capabilities.h"
#include "backend/blas_layout.h"
#include "backend/linalg_kernels.h"
#include "backend/copy_kernels.h"
#include "dp/autograd/function.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"
#include "ops/common.h"
#include "amp/autocast_ops.h"

namespace dp {
namespace {

using autograd::SavedVariable;
using autograd::variable_list;

// ---------------------------------------------------------------------------------------------
// Helpers (no autograd: they only feed kernels).

Tensor raw_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(::dp::detail::make_pooled<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}

Tensor raw_copy(const Tensor& t, DType dt) {
  Tensor c = make_empty(t.sizes(), dt, t.device());
  backend::copy_kernel(backend::copy_device_type(c, t), c, t);
  return c;
}

// PyTorch's C++ spelling of a dtype, as in "expected m1 and m2 to have the same dtype, but got: float != double".
const char* cpp_type_name(DType t) {
  switch (t) {
    case kBool:
      return "bool";
    case kUInt8:
      return "unsigned char";
    case kInt32:
      return "int";
    case kInt64:
      return "long int";
    case kFloat16:
      return "c10::Half";
    case kBFloat16:
      return "c10::BFloat16";
    case kFloat32:
      return "float";
    case kFloat64:
      return "double";
  }
  return "?";
}

// PyTorch's ScalarType name: "Float", "Double", ...
const char* scalar_type_name(DType t) {
  switch (t) {
    case kBool:
      return "Bool";
    case kUInt8:
      return "Byte";
    case kInt32:
      return "Int";
    case kInt64:
      return "Long";
    case kFloat16:
      return "Half";
    case kBFloat16:
      return "BFloat16";
    case kFloat32:
      return "Float";
    case kFloat64:
      return "Double";
  }
  return "?";
}

std::string mat_str(const Tensor& t) {
  std::ostringstream s;
  for (int64_t d = 0; d < t.dim(); ++d) s << (d ? "x" : "") << t.size(d);
  return s.str();
}

void check_inputs(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) ops::check_defined(op, *t);
  ops::check_same_device(op, ts);
  for (const Tensor* t : ts)
    if (t->defined())
      DP_CHECK(backend::capabilities(t->device()).kernels, NotImplementedError, op, ": not implemented for ", t->device().str(), " tensors");
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b, const char* an = "m1", const char* bn = "m2") {
  DP_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": expected ", an, " and ", bn, " to have the same dtype, but got: ", cpp_type_name(a.dtype()),
           " != ", cpp_type_name(b.dtype()));
}

void check_product_dtype(const char* op, DType t) {
  DP_CHECK(t != kBool, DTypeError, op, ": not implemented for 'Bool' tensors (supported: uint8, int32, int64, float16, bfloat16, float32, float64)");
}

bool is_zero(const Scalar& s) { return s.to_double() == 0.0 && (s.is_floating_point() || s.to_int() == 0); }
bool is_one(const Scalar& s) { return s.is_floating_point() ? s.to_double() == 1.0 : s.to_int() == 1; }

using backend::blas_layout;
using backend::fold_rows;

// C [*batch, m, n] (contiguous) = alpha * A @ B + beta * C (beta == 0: C's contents are ignored).
// tf32_ok: a float32 product on CUDA may use TF32 when dp::cuda::allow_tf32() (not for dot).
void matmul_kernel(const Tensor& C, const Tensor& A, const Tensor& B, const Scalar& alpha, const Scalar& beta, const char* op, bool tf32_ok = true) {
  check_product_dtype(op, C.dtype());
  backend::matmul_kernel(C.device().type, C, A, B, alpha, beta, op, tf32_ok);
}

void check_integral_scalars(const char* op, DType t, const Scalar& beta, const Scalar& alpha) {
  if (is_floating_point(t)) return;
  DP_CHECK(!beta.is_floating_point(), ValueError, op, ": for integral input tensors, argument beta must not be a floating point number.");
  DP_CHECK(!alpha.is_floating_point(), ValueError, op, ": for integral input tensors, argument alpha must not be a floating point number.");
}

// Result of matmul on matrices/batches: [*batch, n, m] for A [*, n, k] and B [*, k, m].
Tensor matmul_out(const Tensor& A, const Tensor& B, const char* op) {
  Shape ba(A.sizes().begin(), A.sizes().end() - 2), bb(B.sizes().begin(), B.sizes().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, op);
  Shape out_shape = batch;
  out_shape.push_back(A.size(-2));
  out_shape.push_back(B.size(-1));
  Tensor C = make_empty(out_shape, A.dtype(), A.device());
  matmul_kernel(C, A, B, 1, 0, op);
  return C;
}

// Whether `sizes` broadcasts to `target` (without growing it).
bool broadcasts_to(IntArrayRef sizes, IntArrayRef target) {
  if (sizes.size() > target.size()) return false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t s = sizes[sizes.size() - 1 - i], t = target[target.size() - 1 - i];
    if (s != t && s != 1) return false;
  }
  return true;
}

Tensor mT(const Tensor& t) { return dp::transpose(t, -2, -1); }

Tensor scaled(const Tensor& t, const Scalar& s) { return is_one(s) ? t : dp::mul(t, s); }

}  // namespace

// -----------------------------------------------------------------------------------------------

Tensor mm(const Tensor& a, const Tensor& b) {
  if (autocast::detail::Cast ac{autocast::detail::Op::mm, {&a, &b}}) return ac([&] { return dp::mm(ac[0], ac[1]); });
  check_inputs("mm", {&a, &b});
  DP_CHECK(a.dim() == 2, ShapeError, "mm: self must be a matrix, got a ", a.dim(), "-D tensor of shape ", a.size_str());
  DP_CHECK(b.dim() == 2, ShapeError, "mm: mat2 must be a matrix, got a ", b.dim(), "-D tensor of shape ", b.size_str());
  DP_CHECK(a.size(1) == b.size(0), ShapeError, "mm: mat1 and mat2 shapes cannot be multiplied (", mat_str(a), " and ", mat_str(b), ")");
  check_same_dtype("mm", a, b);
  check_product_dtype("mm", a.dtype());
  Tensor out = matmul_out(a, b, "mm");
  const bool ga = autograd::needs_grad(a), gb = autograd::needs_grad(b);
  if (ga || gb) {
    SavedVariable sa = gb ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb = ga ? SavedVariable(b, false) : SavedVariable();
    autograd::record("MmBackward0", {a, b}, {out}, [sa, sb, ga, gb](variable_list&& g) {
      Tensor da = ga ? dp::mm(g[0], sb.unpack().t()) : Tensor();
      Tensor db = gb ? dp::mm(sa.unpack().t(), g[0]) : Tensor();
      return variable_list{da, db};
    });
  }
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (autocast::detail::Cast ac{autocast::detail::Op::bmm, {&a, &b}}) return ac([&] { return dp::bmm(ac[0], ac[1]); });
  check_inputs("bmm", {&a, &b});
  DP_CHECK(a.dim() == 3, ShapeError, "bmm: batch1 must be a 3D tensor, got a ", a.dim(), "-D tensor of shape ", a.size_str());
  DP_CHECK(b.dim() == 3, ShapeError, "bmm: batch2 must be a 3D tensor, got a ", b.dim(), "-D tensor of shape ", b.size_str());
  DP_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2), ShapeError, "bmm: Expected size for first two dimensions of batch2 tensor to be: [",
           a.size(0), ", ", a.size(2), "] but got: [", b.size(0), ", ", b.size(1), "].");
  check_same_dtype("bmm", a, b);
  check_product_dtype("bmm", a.dtype());
  Tensor out = matmul_out(a, b, "bmm");
  const bool ga = autograd::needs_grad(a), gb = autograd::needs_grad(b);
  if (ga || gb) {
    SavedVariable sa = gb ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb = ga ? SavedVariable(b, false) : SavedVariable();
    autograd::record("BmmBackward0", {a, b}, {out}, [sa, sb, ga, gb](variable_list&& g) {
      Tensor da = ga ? dp::bmm(g[0], sb.unpack().transpose(1, 2)) : Tensor();
      Tensor db = gb ? dp::bmm(sa.unpack().transpose(1, 2), g[0]) : Tensor();
      return variable_list{da, db};
    });
  }
  return out;
}

Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  if (autocast::detail::Cast ac{autocast::detail::Op::addmm, {&self, &a, &b}}) return ac([&] { return dp::addmm(ac[0], ac[1], ac[2], beta, alpha); });
  check_inputs("addmm", {&self, &a, &b});
  DP_CHECK(a.dim() == 2, ShapeError, "addmm: mat1 must be a matrix, got a ", a.dim(), "-D tensor of shape ", a.size_str());
  DP_CHECK(b.dim() == 2, ShapeError, "addmm: mat2 must be a matrix, got a ", b.dim(), "-D tensor of shape ", b.size_str());
  DP_CHECK(a.size(1) == b.size(0), ShapeError, "addmm: mat1 and mat2 shapes cannot be multiplied (", mat_str(a), " and ", mat_str(b), ")");
  check_same_dtype("addmm", a, b);
  check_same_dtype("addmm", self, b, "self", "mat2");
  check_product_dtype("addmm", a.dtype());
  check_integral_scalars("addmm", a.dtype(), beta, alpha);
  const Shape out_shape{a.size(0), b.size(1)};
  DP_CHECK(broadcasts_to(self.sizes(), out_shape), ShapeError, "addmm: self of shape ", self.size_str(), " cannot be broadcast to the result shape ",
           shape_str(out_shape));
  Tensor out = make_empty(out_shape, a.dtype(), a.device());
  if (is_one(alpha) && is_one(beta)) {  // Linear's form (on CUDA the bias row is added by the GEMM's epilogue)
    backend::matmul_bias_kernel(out.device().type, out, a, b, self, "addmm");
  } else {
    if (!is_zero(beta)) backend::copy_kernel(backend::copy_device_type(out, self), out, self);  // the bias row, broadcast: the GEMM adds onto it
    matmul_kernel(out, a, b, alpha, beta, "addmm");
  }
  const bool gs = autograd::needs_grad(self), ga = autograd::needs_grad(a), gb = autograd::needs_grad(b);
  if (gs || ga || gb) {
    SavedVariable sa = gb ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb = ga ? SavedVariable(b, false) : SavedVariable();
    Shape self_shape = self.sizes();
    autograd::record("AddmmBackward0", {self, a, b}, {out}, [sa, sb, gs, ga, gb, beta, alpha, self_shape](variable_list&& g) {
      Tensor ds = gs ? scaled(dp::sum_to(g[0], self_shape), beta) : Tensor();
      Tensor da = ga ? scaled(dp::mm(g[0], sb.unpack().t()), alpha) : Tensor();
      Tensor db = gb ? scaled(dp::mm(sa.unpack().t(), g[0]), alpha) : Tensor();
      return variable_list{ds, da, db};
    });
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast::detail::Cast ac{autocast::detail::Op::matmul, {&a, &b}}) return ac([&] { return dp::matmul(ac[0], ac[1]); });
  check_inputs("matmul", {&a, &b});
  const int64_t da = a.dim(), db = b.dim();
  DP_CHECK(da >= 1 && db >= 1, ShapeError, "matmul: both arguments to matmul need to be at least 1D, but they are ", da, "D and ", db, "D");
  check_same_dtype("matmul", a, b);
  if (da == 1 && db == 1) return dp::dot(a, b);
  if (da == 2 && db == 2) return dp::mm(a, b);
  check_product_dtype("matmul", a.dtype());
  // 1-D operands become a [1, k] row or a [k, 1] column (views, no copy).
  const Tensor A = da == 1 ? raw_view(a, {1, a.size(0)}, {a.size(0) * a.stride(0), a.stride(0)}, a.storage_offset()) : a;
  const Tensor B = db == 1 ? raw_view(b, {b.size(0), 1}, {b.stride(0), 1}, b.storage_offset()) : b;
  DP_CHECK(A.size(-1) == B.size(-2), ShapeError, "matmul: shapes ", a.size_str(), " and ", b.size_str(), " cannot be multiplied (", A.size(-1),
           " != ", B.size(-2), ")");
  Tensor C = matmul_out(A, B, "matmul");
  Shape out_shape(C.sizes().begin(), C.sizes().end() - 2);
  if (da > 1) out_shape.push_back(C.size(-2));
  if (db > 1) out_shape.push_back(C.size(-1));
  Tensor out = raw_view(C, out_shape, contiguous_strides(out_shape), 0);
  const bool ga = autograd::needs_grad(a), gb = autograd::needs_grad(b);
  if (ga || gb) {
    SavedVariable sa = gb ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb = ga ? SavedVariable(b, false) : SavedVariable();
    Shape a_shape = a.sizes(), b_shape = b.sizes();
    // torch names: 2-D @ 1-D is MvBackward0; the others go through mm/bmm in PyTorch.
    const char* name = (da == 2 && db == 1) ? "MvBackward0" : (da <= 2 && db <= 2) ? "MmBackward0" : "BmmBackward0";
    autograd::record(name, {a, b}, {out}, [sa, sb, ga, gb, da, db, a_shape, b_shape](variable_list&& g) {
      // Back to the matrix form: g2 [*batch, n, m], A2 [*, n, k], B2 [*, k, m].
      Tensor g2 = g[0];
      if (db == 1) g2 = dp::unsqueeze(g2, -1);
      if (da == 1) g2 = dp::unsqueeze(g2, -2);
      Tensor grad_a, grad_b;
      if (ga) {
        Tensor b_ = sb.unpack();
        Tensor B2 = db == 1 ? dp::unsqueeze(b_, -1) : b_;
        Shape a2_shape = da == 1 ? Shape{1, a_shape[0]} : a_shape;
        grad_a = dp::sum_to(dp::matmul(g2, mT(B2)), a2_shape);
        if (da == 1) grad_a = dp::reshape(grad_a, a_shape);
      }
      if (gb) {
        Tensor a_ = sa.unpack();
        Tensor A2 = da == 1 ? dp::unsqueeze(a_, 0) : a_;
        Shape b2_shape = db == 1 ? Shape{b_shape[0], 1} : b_shape;
        if (b2_shape.size() == 2 && A2.dim() > 2) {  // weight-like B: one GEMM over all batch rows
          const int64_t k = A2.size(-1), m = g2.size(-1), rows = numel_of(IntArrayRef(A2.sizes().data(), A2.sizes().size() - 1));
          grad_b = dp::mm(dp::reshape(A2, {rows, k}).t(), dp::reshape(g2, {rows, m}));
        } else {
          grad_b = dp::sum_to(dp::matmul(mT(A2), g2), b2_shape);
        }
        if (db == 1) grad_b = dp::reshape(grad_b, b_shape);
      }
      return variable_list{grad_a, grad_b};
    });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (autocast::detail::Cast ac{autocast::detail::Op::linear, {&x, &w, &b}}) return ac([&] { return dp::linear(ac[0], ac[1], ac[2]); });
  check_inputs("linear", {&x, &w});  // the bias is optional
  if (b.defined()) check_inputs("linear", {&x, &b});
  DP_CHECK(x.dim() >= 1, ShapeError, "linear: input must have at least 1 dimension, got a 0-D tensor");
  DP_CHECK(w.dim() == 2, ShapeError, "linear: weight must be 2-D [out_features, in_features], got shape ", w.size_str());
  const int64_t in = x.size(-1), out_f = w.size(0);
  const int64_t rows = in == 0 ? numel_of(IntArrayRef(x.sizes().data(), x.sizes().size() - 1)) : x.numel() / in;
  DP_CHECK(in == w.size(1), ShapeError, "linear: mat1 and mat2 shapes cannot be multiplied (", rows, "x", in, " and ", w.size(1), "x", out_f, ")");
  check_same_dtype("linear", x, w, "input", "weight");
  if (b.defined()) check_same_dtype("linear", x, b, "input", "bias");
  check_product_dtype("linear", x.dtype());
  const Shape out2{rows, out_f};
  if (b.defined())
    DP_CHECK(b.dim() <= 1 && broadcasts_to(b.sizes(), out2), ShapeError, "linear: bias of shape ", b.size_str(), " does not match out_features ",
             out_f);
  // x as a [rows, in] matrix (a view when the leading dims fold, else a copy), w.t() as a view.
  Tensor X2;
  if (x.numel() == 0) {
    X2 = make_empty({rows, in}, x.dtype(), x.device());  // nothing to read
  } else if (x.dim() == 1) {
    X2 = raw_view(x, {1, in}, {in * x.stride(0), x.stride(0)}, x.storage_offset());
  } else if (x.dim() == 2 && blas_layout(x.size(0), in, x.stride(0), x.stride(1))) {
    X2 = x;  // already a BLAS-ready matrix: no view needed (saves a TensorImpl per call)
  } else {
    Tensor xc = x;
    auto l = blas_layout(x.size(-2), in, x.stride(-2), x.stride(-1));
    if (!(l && !l->trans && fold_rows(x, in))) xc = raw_copy(x, x.dtype());
    const int64_t ld = *fold_rows(xc, in);
    X2 = raw_view(xc, {rows, in}, {ld, in > 1 ? xc.stride(-1) : 1}, xc.storage_offset());
  }
  Tensor C = make_empty(out2, x.dtype(), x.device());
  // The backend's direct path where it has one for these operands (on the CPU: float32/float64
  // to OpenBLAS without a w.t() view), else the matrix product kernels over a w.t() view (on CUDA
  // one cuBLASLt call with the bias epilogue where it can).
  const DeviceType type = x.device().type;
  if (!(backend::linear_forward_kernel.has(type) && backend::linear_forward_kernel(type, C, X2, w, b))) {
    Tensor WT = raw_view(w, {in, out_f}, {w.stride(1), w.stride(0)}, w.storage_offset());
    if (b.defined())
      backend::matmul_bias_kernel(type, C, X2, WT, b, "linear");
    else
      matmul_kernel(C, X2, WT, 1, 0, "linear");
  }
  Tensor out = C;
  if (x.dim() != 2) {
    Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
    out_shape.push_back(out_f);
    out = raw_view(C, out_shape, contiguous_strides(out_shape), 0);
  }
  const bool gx = autograd::needs_grad(x), gw = autograd::needs_grad(w), gbias = autograd::needs_grad(b);
  if (gx || gw || gbias) {
    SavedVariable sx = gw ? SavedVariable(x, false) : SavedVariable();
    SavedVariable sw = gx ? SavedVariable(w, false) : SavedVariable();
    Shape b_shape = b.defined() ? b.sizes() : Shape{};
    autograd::record(b.defined() ? "AddmmBackward0" : "MmBackward0", {x, w, b}, {out},
                     [sx, sw, gx, gw, gbias, rows, in, out_f, b_shape](variable_list&& g) {
                       // A plain backward (no create_graph) goes straight to the backend's GEMMs where it
                       // has a direct path (the CPU's, for float32/float64): no views, shape checks or graph
                       // for the formulas below.
                       const DeviceType gtype = g[0].device().type;
                       if (!GradMode::is_enabled() && rows > 0 && in > 0 && out_f > 0 && backend::linear_backward_kernel.has(gtype)) {
                         Tensor xs = gw ? sx.unpack() : Tensor(), ws = gx ? sw.unpack() : Tensor();
                         // The GEMMs read the saved tensors as g's dtype on g's device type: a saved input
                         // given other data since (set_data, Module::to to another dtype or device type) takes
                         // the checked path.
                         auto fits = [&](const Tensor& t) { return !t.defined() || (t.dtype() == g[0].dtype() && t.device().type == gtype); };
                         Tensor dx, dw;
                         if (fits(xs) && fits(ws) && backend::linear_backward_kernel(gtype, g[0], xs, ws, rows, in, out_f, dx, dw))
                           return variable_list{std::move(dx), std::move(dw), gbias ? dp::sum_to(g[0], b_shape) : Tensor()};
                       }
                       Tensor dx = gx ? dp::matmul(g[0], sw.unpack()) : Tensor();
                       Tensor dw = gw ? dp::mm(dp::reshape(g[0], {rows, out_f}).t(), dp::reshape(sx.unpack(), {rows, in})) : Tensor();
                       Tensor db = gbias ? dp::sum_to(g[0], b_shape) : Tensor();
                       return variable_list{dx, dw, db};
                     });
  }
  return out;
}

Tensor dot(const Tensor& a, const Tensor& b) {
  if (autocast::detail::Cast ac{autocast::detail::Op::dot, {&a, &b}}) return ac([&] { return dp::dot(ac[0], ac[1]); });
  check_inputs("dot", {&a, &b});
  DP_CHECK(a.dim() == 1 && b.dim() == 1, ShapeError, "dot: 1D tensors expected, but got ", a.dim(), "D and ", b.dim(), "D tensors");
  DP_CHECK(a.size(0) == b.size(0), ShapeError, "dot: inconsistent tensor size, expected tensor [", a.size(0), "] and src [", b.size(0),
           "] to have the same number of elements, but got ", a.size(0), " and ", b.size(0), " elements respectively");
  DP_CHECK(a.dtype() == b.dtype(), DTypeError, "dot: expected both vectors to have same dtype, but found ", scalar_type_name(a.dtype()), " and ",
           scalar_type_name(b.dtype()));
  check_product_dtype("dot", a.dtype());
  Tensor out = make_empty({}, a.dtype(), a.device());
  backend::dot_kernel(out.device().type, out, a, b);
  const bool ga = autograd::needs_grad(a), gb = autograd::needs_grad(b);
  if (ga || gb) {
    SavedVariable sa = gb ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb = ga ? SavedVariable(b, false) : SavedVariable();
    autograd::record("DotBackward0", {a, b}, {out}, [sa, sb, ga, gb](variable_list&& g) {
      Tensor da = ga ? dp::mul(g[0], sb.unpack()) : Tensor();
      Tensor db = gb ? dp::mul(g[0], sa.unpack()) : Tensor();
      return variable_list{da, db};
    });
  }
  return out;
}

Tensor outer(const Tensor& a, const Tensor& b) {
  check_inputs("outer", {&a, &b});
  DP_CHECK(a.dim() == 1, ShapeError, "outer: Expected 1-D argument self, but got ", a.dim(), "-D");
  DP_CHECK(b.dim() == 1, ShapeError, "outer: Expected 1-D argument vec2, but got ", b.dim(), "-D");
  const DType rt = promote_types(a.dtype(), b.dtype());
  const int64_t n = a.size(0), m = b.size(0);
  Tensor out = make_empty({n, m}, rt, a.device());
  backend::outer_kernel(out.device().type, out, a, b);
  const bool ga = autograd::needs_grad(a), gb = autograd::needs_grad(b);
  if (ga || gb) {
    SavedVariable sa = gb ? SavedVariable(a, false) : SavedVariable();
    SavedVariable sb = ga ? SavedVariable(b, false) : SavedVariable();
    const DType ta = a.dtype(), tb = b.dtype();
    autograd::record("OuterBackward0", {a, b}, {out}, [sa, sb, ga, gb, ta, tb, rt](variable_list&& g) {
      Tensor da, db;
      if (ga) {  // sum_j g[i, j] * b[j]
        Tensor bv = sb.unpack();
        if (bv.dtype() != rt) bv = bv.to(rt);
        da = dp::matmul(g[0], bv);
        if (da.dtype() != ta) da = da.to(ta);
      }
      if (gb) {  // sum_i a[i] * g[i, j]
        Tensor av = sa.unpack();
        if (av.dtype() != rt) av = av.to(rt);
        db = dp::matmul(av, g[0]);
        if (db.dtype() != tb) db = db.to(tb);
      }
      return variable_list{da, db};
    });
  }
  return out;
}

}  // namespace dp
