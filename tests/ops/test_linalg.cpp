// Matrix products against PyTorch (tests/golden/linalg.json): values for every op, transposed and
// non-contiguous operands, every matmul rank combination, batch broadcasting, integer and 16-bit
// dtypes, empty sizes; gradients of float64 cases against PyTorch's; shape, dtype and device
// errors; node names.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_case;
using test::json;
using test::tensor_from_json;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
using Prep = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Loads case `name`, applies `prep` to the stored inputs (the view the generator applied), runs
// `fn` and compares the output (dtype too) and, where recorded, the gradients.
void run_case(const std::string& name, const Fn& fn, const Prep& prep = nullptr, double rtol = 1e-6, double atol = 1e-9) {
  SCOPED_TRACE(name);
  const json& c = golden_case("linalg.json", name);
  const bool with_grads = c.contains("grads");
  std::vector<Tensor> leaves;
  for (const json& j : c.at("inputs")) {
    Tensor t = tensor_from_json(j);
    if (with_grads && t.dtype() == kFloat64) t.requires_grad_(true);
    leaves.push_back(t);
  }
  std::vector<Tensor> used = prep ? prep(leaves) : leaves;
  Tensor out = fn(used);
  EXPECT_EQ(dtype_name(out.dtype()), c.at("output").at("dtype").get<std::string>());
  EXPECT_TRUE(all_close(out, c.at("output"), rtol, atol));
  if (!with_grads) return;
  std::vector<Tensor> diff;
  std::vector<size_t> which;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (leaves[i].requires_grad()) {
      diff.push_back(leaves[i]);
      which.push_back(i);
    }
  ASSERT_TRUE(out.requires_grad());
  std::vector<Tensor> g = autograd::grad({out}, diff, {tensor_from_json(c.at("grad_output"))});
  for (size_t k = 0; k < diff.size(); ++k) {
    SCOPED_TRACE("gradient of input " + std::to_string(which[k]));
    EXPECT_TRUE(all_close(g[k], c.at("grads")[which[k]], 1e-9, 1e-9));
  }
}

Fn fn2(Tensor (*f)(const Tensor&, const Tensor&)) {
  return [f](const std::vector<Tensor>& x) { return f(x[0], x[1]); };
}

constexpr double kF32 = 1e-5;

// ---------------------------------------------------------------------------------------------- mm

TEST(LinalgGolden, Mm) {
  run_case("mm_f32", fn2(mm), nullptr, kF32, kF32);
  run_case("mm_f64", fn2(mm));
  run_case("mm_vector_shapes", fn2(mm));
  run_case("mm_large_f32", fn2(mm), nullptr, kF32, 1e-4);
}

TEST(LinalgGolden, MmTransposedOperandsNeedNoCopy) {
  run_case("mm_a_t", fn2(mm), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].t(), x[1]}; });
  run_case("mm_b_t", fn2(mm), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0], x[1].t()}; });
  run_case("mm_both_t", fn2(mm), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].t(), x[1].t()}; });
  run_case(
      "mm_f32_both_t", fn2(mm),
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{x[0].t(), x[1].t()};
      },
      kF32, 1e-4);
}

TEST(LinalgGolden, MmNonContiguous) {
  run_case("mm_noncontig", fn2(mm), [](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{x[0].slice(1, std::nullopt, std::nullopt, 2), x[1].slice(1, 1, std::nullopt, 2)};
  });
}

TEST(LinalgGolden, MmIntegerAndHalfDtypes) {
  run_case("mm_int64", fn2(mm), nullptr, 0, 0);
  run_case("mm_int32", fn2(mm), nullptr, 0, 0);
  run_case("mm_uint8_wrap", fn2(mm), nullptr, 0, 0);
  run_case("mm_f16", fn2(mm), nullptr, 2e-3, 1e-3);
  run_case("mm_bf16", fn2(mm), nullptr, 1e-2, 1e-2);
}

TEST(LinalgGolden, MmEmpty) {
  run_case("mm_empty_rows", fn2(mm));
  run_case("mm_empty_k", fn2(mm));  // [3,0] @ [0,4] = zeros
  Tensor z = mm(zeros({3, 0}), zeros({0, 4}));
  EXPECT_EQ(z.sizes(), (Shape{3, 4}));
  EXPECT_EQ(z.sum().item<double>(), 0.0);
}

// --------------------------------------------------------------------------------------------- bmm

TEST(LinalgGolden, Bmm) {
  run_case("bmm_f64", fn2(bmm));
  run_case(
      "bmm_f32_b_t", fn2(bmm),
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{x[0], x[1].transpose(1, 2)};
      },
      kF32, kF32);
  run_case("bmm_a_t", fn2(bmm), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].transpose(1, 2), x[1]}; });
  run_case("bmm_int64", fn2(bmm), nullptr, 0, 0);
  run_case("bmm_batch_permuted", fn2(bmm), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].permute({1, 0, 2}), x[1]}; });
  run_case("bmm_empty_k", fn2(bmm));
}

// ------------------------------------------------------------------------------------------- addmm

Fn addmm_fn(Scalar beta = 1, Scalar alpha = 1) {
  return [beta, alpha](const std::vector<Tensor>& x) { return addmm(x[0], x[1], x[2], beta, alpha); };
}

TEST(LinalgGolden, Addmm) {
  run_case("addmm_bias_row", addmm_fn());
  run_case("addmm_full_beta_alpha", addmm_fn(0.5, 2.0));
  run_case("addmm_col_bias", addmm_fn());
  run_case("addmm_scalar_bias", addmm_fn());
  run_case(
      "addmm_f32_wt", addmm_fn(),
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{x[0], x[1], x[2].t()};
      },
      kF32, kF32);
  run_case("addmm_int64", addmm_fn(2, 3), nullptr, 0, 0);
  run_case("addmm_empty_k", addmm_fn(0.5));
}

TEST(LinalgGolden, AddmmBetaZeroIgnoresSelf) {  // NaN in self does not propagate when beta == 0
  run_case("addmm_beta0", addmm_fn(0.0, 1.0));
}

// ------------------------------------------------------------------------------------------ matmul

TEST(LinalgGolden, MatmulEveryRankCombination) {
  for (const char* name : {"matmul_1d_1d", "matmul_2d_1d", "matmul_1d_2d", "matmul_2d_2d", "matmul_3d_2d", "matmul_2d_3d", "matmul_3d_1d",
                           "matmul_1d_3d", "matmul_3d_3d", "matmul_4d_4d", "matmul_4d_1d"})
    run_case(name, fn2(matmul));
}

TEST(LinalgGolden, MatmulBroadcastsBatchDims) {
  run_case("matmul_broadcast", fn2(matmul));
  run_case("matmul_broadcast_batch1", fn2(matmul));
}

TEST(LinalgGolden, MatmulStridedOperands) {
  run_case("matmul_3d_2d_t", fn2(matmul), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0], x[1].t()}; });
  run_case("matmul_3d_2d_noncontig", fn2(matmul), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].transpose(0, 1), x[1]}; });
  run_case(
      "matmul_f32_3d_3d_t", fn2(matmul),
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{x[0], x[1].transpose(-1, -2)};
      },
      kF32, kF32);
}

TEST(LinalgGolden, MatmulIntegerAndEmpty) {
  run_case("matmul_int64_3d_2d", fn2(matmul), nullptr, 0, 0);
  run_case("matmul_empty_batch", fn2(matmul));
}

// ------------------------------------------------------------------------------------------ linear

Fn linear_fn() {
  return [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor()); };
}

TEST(LinalgGolden, Linear) {
  for (const char* name : {"linear_2d_bias", "linear_2d_nobias", "linear_3d_bias", "linear_1d_bias", "linear_4d_nobias", "linear_empty_in"})
    run_case(name, linear_fn());
  run_case("linear_noncontig_x", linear_fn(), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].t(), x[1], x[2]}; });
  run_case("linear_wt_view", linear_fn(), [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0], x[1].t(), x[2]}; });
  run_case("linear_f32", linear_fn(), nullptr, kF32, kF32);
}

// ------------------------------------------------------------------------------------- dot / outer

TEST(LinalgGolden, DotAndOuter) {
  run_case("dot_f64", fn2(dot));
  run_case(
      "dot_f32_strided", fn2(dot),
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{x[0].slice(0, std::nullopt, std::nullopt, 2), x[1]};
      },
      kF32, kF32);
  run_case("dot_int64", fn2(dot), nullptr, 0, 0);
  run_case("dot_empty", fn2(dot));
  run_case("outer_f64", fn2(outer));
  run_case("outer_mixed", fn2(outer), nullptr, 1e-6, 1e-7);  // float32 x float64 promotes to float64
  run_case("outer_int32", fn2(outer), nullptr, 0, 0);
}

// -------------------------------------------------------------------------------- names and views

TEST(Linalg, NodeNamesFollowPyTorch) {
  Tensor a = rand({3, 4}, kFloat64).requires_grad_(), b = rand({4, 5}, kFloat64).requires_grad_();
  Tensor bias = rand({5}, kFloat64).requires_grad_(), w = rand({5, 4}, kFloat64).requires_grad_();
  EXPECT_EQ(mm(a, b).grad_fn()->name(), "MmBackward0");
  EXPECT_EQ(addmm(bias, a, b).grad_fn()->name(), "AddmmBackward0");
  EXPECT_EQ(linear(a, w, bias).grad_fn()->name(), "AddmmBackward0");
  EXPECT_EQ(linear(a, w).grad_fn()->name(), "MmBackward0");
  EXPECT_EQ(matmul(a, b).grad_fn()->name(), "MmBackward0");
  EXPECT_EQ(matmul(a, b.select(1, 0)).grad_fn()->name(), "MvBackward0");
  EXPECT_EQ(matmul(a.select(1, 0), a.select(1, 1)).grad_fn()->name(), "DotBackward0");
  EXPECT_EQ(matmul(a.select(1, 0), a).grad_fn()->name(), "MmBackward0");  // [3] @ [3, 4]
  EXPECT_EQ(matmul(a.unsqueeze(0), b).grad_fn()->name(), "BmmBackward0");
  EXPECT_EQ(bmm(a.unsqueeze(0), b.unsqueeze(0)).grad_fn()->name(), "BmmBackward0");
  EXPECT_EQ(dot(a.select(0, 0), a.select(0, 1)).grad_fn()->name(), "DotBackward0");
  EXPECT_FALSE(mm(a.detach(), b.detach()).requires_grad());
  {
    NoGradGuard ng;
    EXPECT_FALSE(mm(a, b).requires_grad());
  }
}

TEST(Linalg, OutputsAreFreshContiguousTensors) {
  Tensor a = rand({2, 3, 4}), w = rand({5, 4}), b = rand({5});
  for (const Tensor& out : {linear(a, w, b), matmul(a, w.t()), bmm(a, a.transpose(1, 2)), mm(w, w.t())}) {
    EXPECT_TRUE(out.is_contiguous());
    EXPECT_NE(out.data_ptr(), a.data_ptr());
  }
  // linear keeps the leading dims: [2, 3, 4] -> [2, 3, 5]
  EXPECT_EQ(linear(a, w, b).sizes(), (Shape{2, 3, 5}));
  // the inputs are not modified (the bias is copied into the output, not accumulated into)
  std::vector<float> before = b.to_vector<float>();
  linear(a, w, b);
  EXPECT_EQ(b.to_vector<float>(), before);
}

TEST(Linalg, LinearMatchesMatmulPlusBiasOnManyShapes) {
  for (Shape xs : {Shape{7}, Shape{1, 7}, Shape{5, 7}, Shape{2, 3, 7}, Shape{2, 1, 4, 7}}) {
    Tensor x = randn(xs, kFloat64), w = randn({6, 7}, kFloat64), b = randn({6}, kFloat64);
    EXPECT_TRUE(all_close(linear(x, w, b), matmul(x, w.t()) + b, 1e-12, 1e-12)) << shape_str(xs);
  }
}

// C = A @ B in double from the elements (an independent reference for the GEMM paths).
Tensor reference_mm(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) out[i * n + j] += av[i * k + p] * bv[p * n + j];
  return tensor<double>(out, {m, n});
}

// Products of at most 2048 multiply-adds skip OpenBLAS (blas.cpp's tiny path): every transposition
// and leading dimension, both dtypes, on both sides of the threshold, against a float64 reference.
TEST(Linalg, TinyAndBlasProductsMatchAReference) {
  struct Dims {
    int64_t m, n, k;
  };
  for (Dims d :
       {Dims{1, 1, 1}, Dims{30, 1, 5}, Dims{1, 5, 30}, Dims{3, 7, 2}, Dims{12, 13, 13}, Dims{13, 13, 13}, Dims{2, 64, 16}, Dims{64, 2, 17}}) {
    for (DType dt : {kFloat32, kFloat64}) {
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        // A transposed operand is a t() view (BLAS reads it with the trans flag); the others are
        // column slices of wider matrices, so their leading dimension is not their width.
        Tensor a = ta ? randn({d.k, d.m}, dt).t() : randn({d.m, d.k + 3}, dt).narrow(1, 1, d.k);
        Tensor b = tb ? randn({d.n, d.k}, dt).t() : randn({d.k, d.n + 2}, dt).narrow(1, 0, d.n);
        SCOPED_TRACE(std::to_string(d.m) + "x" + std::to_string(d.k) + " @ " + std::to_string(d.k) + "x" + std::to_string(d.n) + " " +
                     dtype_name(dt) + " trans " + std::to_string(ta) + std::to_string(tb));
        const double tol = dt == kFloat32 ? 2e-5 : 1e-12;
        Tensor ref = reference_mm(a, b);
        EXPECT_TRUE(all_close(mm(a, b), ref, tol, tol));
        // addmm: alpha and beta, a broadcast bias row; beta = 0 ignores NaNs in self.
        Tensor bias = randn({d.n}, dt);
        EXPECT_TRUE(all_close(addmm(bias, a, b, 0.5, 2.0), ref * 2.0 + bias.to(kFloat64) * 0.5, tol, tol));
        Tensor nan_self = full({d.m, d.n}, std::numeric_limits<double>::quiet_NaN(), dt);
        EXPECT_TRUE(all_close(addmm(nan_self, a, b, 0.0, 1.0), ref, tol, tol));
        // linear (x @ w.t() + b) and its gradients, by the direct backward below the threshold too.
        Tensor x = a.detach().requires_grad_(true), w = b.t().detach().requires_grad_(true), lb = bias.detach().requires_grad_(true);
        Tensor y = linear(x, w, lb);
        EXPECT_TRUE(all_close(y, ref + bias.to(kFloat64), tol, tol));
        Tensor g = randn({d.m, d.n}, dt);
        y.backward(g);
        EXPECT_TRUE(all_close(x.grad(), reference_mm(g, w.detach()), tol, tol));
        EXPECT_TRUE(all_close(w.grad(), reference_mm(g.t(), x.detach()), tol, tol));
        EXPECT_TRUE(all_close(lb.grad(), sum(g.to(kFloat64), {0}), tol, tol));
      }
    }
  }
}

// linear's plain backward (grad mode off: straight GEMMs on the operands' memory) equals its
// differentiable backward (create_graph: dp ops), for every operand layout and optional part.
TEST(Linalg, LinearDirectBackwardEqualsTheDifferentiableOne) {
  struct Case {
    Shape x;
    bool x_grad, w_grad, bias, bias_grad, x_transposed, w_transposed;
  };
  const std::vector<Case> cases = {
      {{5, 7}, true, true, true, true, false, false},    {{7}, true, true, true, true, false, false},
      {{2, 3, 7}, true, true, true, true, false, false}, {{5, 7}, false, true, true, true, false, false},
      {{5, 7}, true, false, true, false, false, false},  {{5, 7}, true, true, false, false, false, false},
      {{5, 7}, true, true, true, true, true, false},     {{5, 7}, true, true, true, true, false, true},
      {{4, 5, 7}, true, true, true, true, true, true},   {{1, 7}, true, true, true, true, false, false},
  };
  for (DType dt : {kFloat32, kFloat64})
    for (const Case& c : cases) {
      SCOPED_TRACE(shape_str(c.x) + " " + dtype_name(dt) + " x_grad " + std::to_string(c.x_grad) + " w_grad " + std::to_string(c.w_grad) + " bias " +
                   std::to_string(c.bias) + " x_t " + std::to_string(c.x_transposed) + " w_t " + std::to_string(c.w_transposed));
      Tensor x = randn(c.x, dt);
      if (c.x_transposed) x = x.transpose(0, -1).contiguous().transpose(0, -1);  // same values, non-contiguous
      Tensor w = c.w_transposed ? randn({7, 6}, dt).t() : randn({6, 7}, dt);
      Tensor b = c.bias ? randn({6}, dt) : Tensor();
      auto leaves = [&] {
        std::vector<Tensor> out{x.detach().requires_grad_(c.x_grad), w.detach().requires_grad_(c.w_grad)};
        out.push_back(c.bias ? b.detach().requires_grad_(c.bias_grad) : Tensor());
        return out;
      };
      Shape y_shape = c.x;
      y_shape.back() = 6;
      Tensor g = randn(y_shape, dt);
      // Plain backward: the direct path.
      std::vector<Tensor> p = leaves();
      linear(p[0], p[1], p[2]).backward(g);
      // create_graph: the formulas with dp ops.
      std::vector<Tensor> q = leaves();
      std::vector<Tensor> wrt;
      for (const Tensor& t : q)
        if (t.defined() && t.requires_grad()) wrt.push_back(t);
      std::vector<Tensor> dq = autograd::grad({linear(q[0], q[1], q[2])}, wrt, {g}, false, /*create_graph=*/true);
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      size_t k = 0;
      for (size_t i = 0; i < 3; ++i) {
        if (!q[i].defined() || !q[i].requires_grad()) {
          if (p[i].defined()) {
            EXPECT_FALSE(p[i].grad().defined()) << "input " << i << " got a gradient it does not need";
          }
          continue;
        }
        ASSERT_TRUE(p[i].grad().defined()) << "input " << i;
        EXPECT_EQ(p[i].grad().sizes(), p[i].sizes());
        EXPECT_TRUE(all_close(p[i].grad(), dq[k++].detach(), tol, tol)) << "input " << i;
      }
    }
}

TEST(Linalg, MatmulFoldsLargeBatchIntoOneGemmCorrectly) {
  Tensor a = randn({4, 33, 17}, kFloat64), b = randn({17, 9}, kFloat64);
  Tensor out = matmul(a, b);
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(all_close(out.select(0, i), mm(a.select(0, i), b), 1e-12, 1e-12));
  // The same with a batch whose dims do not fold (a transposed view): per-matrix GEMMs.
  Tensor at = randn({33, 4, 17}, kFloat64).transpose(0, 1);
  Tensor out2 = matmul(at, b);
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(all_close(out2.select(0, i), mm(at.select(0, i), b), 1e-12, 1e-12));
}

TEST(Linalg, ExpandedBatchOperandIsReadWithStrideZero) {
  Tensor a = randn({1, 3, 4}, kFloat64).expand({5, 3, 4}), b = randn({5, 4, 2}, kFloat64);
  Tensor out = bmm(a, b);
  for (int64_t i = 0; i < 5; ++i) EXPECT_TRUE(all_close(out.select(0, i), mm(a.select(0, 0), b.select(0, i)), 1e-12, 1e-12));
}

TEST(Linalg, HalfPrecisionRoundsOnce) {
  Tensor a = randn({8, 16}), b = randn({16, 4});
  Tensor ref = mm(a.to(kFloat16).to(kFloat32), b.to(kFloat16).to(kFloat32)).to(kFloat16);
  Tensor got = mm(a.to(kFloat16), b.to(kFloat16));
  EXPECT_EQ(got.dtype(), kFloat16);
  EXPECT_TRUE(all_close(got, ref, 0, 0));
  Tensor gotb = matmul(a.to(kBFloat16).unsqueeze(0), b.to(kBFloat16));
  EXPECT_EQ(gotb.dtype(), kBFloat16);
  EXPECT_TRUE(all_close(gotb.squeeze(0), mm(a.to(kBFloat16).to(kFloat32), b.to(kBFloat16).to(kFloat32)).to(kBFloat16), 0, 0));
}

// ------------------------------------------------------------------------------------------ errors

template <typename E, typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing: " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what() << "\nexpected to contain: " << needle;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type; message: " << e.what();
  }
}

TEST(LinalgErrors, Shapes) {
  expect_error<ShapeError>([] { mm(zeros({3, 4}), zeros({5, 6})); }, "mm: mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)");
  expect_error<ShapeError>([] { mm(zeros({3, 4}), zeros({4})); }, "mm: mat2 must be a matrix");
  expect_error<ShapeError>(
      [] {
        bmm(zeros({2, 3, 4}), zeros({2, 5, 6}));
      },
      "bmm: Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [2, 5].");
  expect_error<ShapeError>([] { bmm(zeros({3, 4}), zeros({3, 4, 6})); }, "bmm: batch1 must be a 3D tensor");
  expect_error<ShapeError>([] { matmul(zeros({}), zeros({4})); }, "both arguments to matmul need to be at least 1D, but they are 0D and 1D");
  expect_error<ShapeError>([] { matmul(zeros({2, 3, 4}), zeros({5, 6})); }, "matmul");
  expect_error<ShapeError>([] { matmul(zeros({2, 3, 4}), zeros({3, 4, 6})); }, "matmul");  // batch 2 vs 3
  expect_error<ShapeError>([] { matmul(zeros({3, 4}), zeros({5})); }, "matmul");
  expect_error<ShapeError>([] { addmm(zeros({7}), zeros({3, 4}), zeros({4, 6})); }, "addmm");
  expect_error<ShapeError>([] { linear(zeros({3, 4}), zeros({5, 6})); }, "linear: mat1 and mat2 shapes cannot be multiplied (3x4 and 6x5)");
  expect_error<ShapeError>([] { linear(zeros({3, 4}), zeros({5, 4}), zeros({6})); }, "linear: bias");
  expect_error<ShapeError>([] { linear(zeros({}), zeros({5, 4})); }, "linear");
  expect_error<ShapeError>([] { dot(zeros({3}), zeros({4})); }, "dot: inconsistent tensor size, expected tensor [3] and src [4]");
  expect_error<ShapeError>([] { dot(zeros({3, 1}), zeros({3})); }, "dot: 1D tensors expected, but got 2D and 1D tensors");
  expect_error<ShapeError>([] { outer(zeros({3}), zeros({3, 1})); }, "outer: Expected 1-D argument vec2, but got 2-D");
}

TEST(LinalgErrors, Dtypes) {
  expect_error<DTypeError>([] { mm(zeros({3, 4}), zeros({4, 5}, kFloat64)); }, "expected m1 and m2 to have the same dtype, but got: float != double");
  expect_error<DTypeError>([] { bmm(zeros({2, 3, 4}, kFloat64), zeros({2, 4, 5})); }, "double != float");
  expect_error<DTypeError>([] { matmul(zeros({2, 3, 4}), zeros({4}, kInt64)); }, "float != long int");
  expect_error<DTypeError>([] { addmm(zeros({5}, kFloat64), zeros({3, 4}), zeros({4, 5})); }, "addmm");
  expect_error<DTypeError>([] { linear(zeros({3, 4}), zeros({5, 4}), zeros({5}, kFloat64)); }, "linear");
  expect_error<DTypeError>([] { dot(zeros({3}), zeros({3}, kFloat64)); },
                           "dot: expected both vectors to have same dtype, but found Float and Double");
  expect_error<DTypeError>([] { mm(zeros({2, 2}, kBool), zeros({2, 2}, kBool)); }, "mm: not implemented for 'Bool'");
  expect_error<DTypeError>([] { dot(zeros({2}, kBool), zeros({2}, kBool)); }, "dot");
  expect_error<ValueError>([] { addmm(zeros({2, 2}, kInt64), zeros({2, 2}, kInt64), zeros({2, 2}, kInt64), 0.5, 1); }, "beta");
}

TEST(LinalgErrors, Devices) {
  Tensor host = zeros({3, 4});
  Tensor dev = zeros({4, 5}, TensorOptions().device(Device("cpu:0")));
  expect_error<DeviceError>([&] { mm(host, dev); }, "expected all tensors to be on the same device");
  expect_error<DeviceError>([&] { matmul(host, dev); }, "cpu:0");
  expect_error<DeviceError>([&] { linear(zeros({2, 5}), dev); }, "linear");
  expect_error<DeviceError>([&] { addmm(zeros({5}), host, dev); }, "addmm");
  expect_error<DeviceError>([&] { dot(zeros({3}), zeros({3}, TensorOptions().device(Device("cpu:0")))); }, "dot");
  // On one device the result stays there.
  Tensor d2 = zeros({3, 4}, TensorOptions().device(Device("cpu:0")));
  EXPECT_EQ(mm(d2, dev).device(), Device("cpu:0"));
}

TEST(LinalgErrors, UndefinedInputs) {
  expect_error<ValueError>([] { mm(Tensor(), zeros({2, 2})); }, "mm");
  // linear's bias may be undefined; its input may not
  expect_error<ValueError>([] { linear(Tensor(), zeros({2, 2})); }, "linear");
}

}  // namespace
}  // namespace dp
