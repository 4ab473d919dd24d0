// scaled_dot_product_attention: PyTorch 2.x's reference values (tests/golden/gen_attention.py) on
// the automatic choice, the exact (math) path, the fused kernel with its own tiles and with tiny
// tiles; the fused path against the exact one on random inputs (forward and backward); gradcheck
// of both paths and of double backward; dropout; bfloat16; layouts; threads; memory; errors.
#include <gtest/gtest.h>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>
#include "backend/cpu/blas.h"
#include "dp/core/allocator.h"
#include "dp/core/worker.h"
#include "dp/nn/functional.h"
#include "dp/ops/attention.h"
#include "ops/attention_internal.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_case;
using test::golden_file;
using test::json;
using test::tensor_from_json;

constexpr const char* kFused = "ScaledDotProductFlashAttentionForCpuBackward0";

// ---------------------------------------------------------------------------------------------
// Golden values

// sin(0.731 * i + phase) over the flat index, rounded to dt (the generator's formula).
Tensor sin_tensor(const Shape& shape, double phase, DType dt) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(0.731 * static_cast<double>(i) + phase);
  return tensor<double>(v, shape).to(dt);
}

Tensor mask_mod5(int64_t L, int64_t S, int64_t dead_row) {
  std::vector<double> v(static_cast<size_t>(L * S));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) v[static_cast<size_t>(i * S + j)] = i != dead_row && (7 * i + 3 * j) % 5 != 0;
  return tensor<double>(v, {L, S}).to(kBool);
}

DType dtype_of(const json& c) { return c.at("dtype") == "float64" ? kFloat64 : kFloat32; }

Tensor input(const json& spec, DType dt, const Shape& shape_if_missing = {}) {
  if (!spec.contains("formula")) return tensor_from_json(spec);
  const std::string f = spec.at("formula");
  if (f == "sin") return sin_tensor(spec.contains("shape") ? spec.at("shape").get<Shape>() : shape_if_missing, spec.at("phase").get<double>(), dt);
  const Shape s = spec.at("shape").get<Shape>();
  return mask_mod5(s[0], s[1], spec.at("dead_row").get<int64_t>());
}

enum class Path { automatic, math, flash, flash_tiny_tiles };
const char* path_name(Path p) {
  switch (p) {
    case Path::automatic:
      return "automatic";
    case Path::math:
      return "math";
    case Path::flash:
      return "flash";
    case Path::flash_tiny_tiles:
      return "flash_tiny_tiles";
  }
  return "?";
}

struct Result {
  Tensor out, dq, dk, dv, dmask;
  std::string grad_fn;
};

struct Args {
  Args() = default;
  Args(Tensor q_, Tensor k_, Tensor v_, Tensor mask_ = Tensor()) : q(std::move(q_)), k(std::move(k_)), v(std::move(v_)), mask(std::move(mask_)) {}
  Tensor q, k, v, mask;
  bool causal = false, gqa = false;
  std::optional<double> scale;
  double dropout = 0.0;
};

// Runs SDPA on fresh leaf copies of the inputs by the given path; the loss is sum(out * r).
Result run(const Args& a, const Tensor& r, Path path, int64_t bq = 3, int64_t bk = 5) {
  std::optional<SDPAKernelGuard> backend;
  std::optional<detail::SdpaTilesGuard> tiles;
  if (path == Path::math) backend.emplace(SDPBackend::math);
  if (path == Path::flash || path == Path::flash_tiny_tiles) backend.emplace(SDPBackend::flash_attention);
  if (path == Path::flash_tiny_tiles) tiles.emplace(bq, bk);
  Tensor q = a.q.detach().requires_grad_(true), k = a.k.detach().requires_grad_(true), v = a.v.detach().requires_grad_(true);
  Tensor mask = a.mask;
  const bool mask_grad = mask.defined() && mask.dtype() != kBool && a.mask.requires_grad();
  if (mask_grad) mask = a.mask.detach().requires_grad_(true);
  Result res;
  res.out = scaled_dot_product_attention(q, k, v, mask, a.dropout, a.causal, a.scale, a.gqa);
  res.grad_fn = res.out.grad_fn() ? res.out.grad_fn()->name() : "";
  if (r.defined()) {
    sum(res.out * r).backward();
    res.dq = q.grad();
    res.dk = k.grad();
    res.dv = v.grad();
    if (mask_grad) res.dmask = mask.grad();
  }
  return res;
}

class Golden : public ::testing::TestWithParam<std::tuple<std::string, Path>> {};

TEST_P(Golden, OutputAndGradients) {
  const auto& [name, path] = GetParam();
  const json& c = golden_case("attention.json", name);
  const DType dt = dtype_of(c);
  Args a;
  a.q = input(c.at("q"), dt);
  a.k = input(c.at("k"), dt);
  a.v = input(c.at("v"), dt);
  if (c.contains("mask")) {
    a.mask = input(c.at("mask"), dt);
    if (c.at("mask_grad").get<bool>()) a.mask.requires_grad_(true);
  }
  a.causal = c.at("is_causal").get<bool>();
  a.gqa = c.at("enable_gqa").get<bool>();
  if (!c.at("scale").is_null()) a.scale = c.at("scale").get<double>();
  const Tensor r = input(c.at("r"), dt, c.at("out").at("shape").get<Shape>());
  const Result res = run(a, r, path);
  const double rtol = dt == kFloat64 ? 1e-10 : 1e-4, atol = dt == kFloat64 ? 1e-12 : 1e-5;
  EXPECT_EQ(res.out.dtype(), dt);
  EXPECT_TRUE(all_close(res.out, c.at("out"), rtol, atol)) << "out";
  const json& g = c.at("grads");
  EXPECT_TRUE(all_close(res.dq, g.at("q"), rtol, atol)) << "dq";
  EXPECT_TRUE(all_close(res.dk, g.at("k"), rtol, atol)) << "dk";
  EXPECT_TRUE(all_close(res.dv, g.at("v"), rtol, atol)) << "dv";
  if (g.contains("mask")) {
    ASSERT_TRUE(res.dmask.defined());
    EXPECT_TRUE(all_close(res.dmask, g.at("mask"), rtol, atol)) << "dmask";
  }
  if (path == Path::flash || path == Path::flash_tiny_tiles) {
    EXPECT_EQ(res.grad_fn, kFused);
  }
  if (path == Path::math) {
    EXPECT_NE(res.grad_fn, kFused);
  }
}

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const json& c : golden_file("attention.json").at("cases")) names.push_back(c.at("name"));
  return names;
}

INSTANTIATE_TEST_SUITE_P(Attention, Golden,
                         ::testing::Combine(::testing::ValuesIn(golden_names()),
                                            ::testing::Values(Path::automatic, Path::math, Path::flash, Path::flash_tiny_tiles)),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + path_name(std::get<1>(info.param)); });

// ---------------------------------------------------------------------------------------------
// The fused path against the exact one

// |a - b| <= 1e-5 * max|b| + 1e-5 * |b|, element-wise: "1e-5 relative" for values of mixed sizes.
::testing::AssertionResult close_rel(const Tensor& a, const Tensor& b, double rel = 1e-5) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined() ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "defined";
  const double scale = b.numel() ? max(abs(b.to(kFloat64))).item<double>() : 0.0;
  return all_close(a, b, rel, rel * scale);
}

void expect_paths_agree(const Args& a, int64_t bq = 0, int64_t bk = 0) {
  Tensor r = randn(run(a, Tensor(), Path::math).out.sizes(), a.q.dtype());
  const Result exact = run(a, r, Path::math);
  const Result fused = bq > 0 ? run(a, r, Path::flash_tiny_tiles, bq, bk) : run(a, r, Path::flash);
  EXPECT_EQ(fused.grad_fn, kFused);
  EXPECT_EQ(fused.out.sizes(), exact.out.sizes());
  EXPECT_TRUE(close_rel(fused.out, exact.out)) << "out";
  EXPECT_TRUE(close_rel(fused.dq, exact.dq)) << "dq";
  EXPECT_TRUE(close_rel(fused.dk, exact.dk)) << "dk";
  EXPECT_TRUE(close_rel(fused.dv, exact.dv)) << "dv";
  EXPECT_TRUE(close_rel(fused.dmask, exact.dmask)) << "dmask";
}

TEST(AttentionFusedVsExact, PlainMaskedCausalGqa) {
  manual_seed(1);
  const int64_t B = 2, H = 3, L = 150, S = 290, E = 32, Ev = 24;
  Args a{randn({B, H, L, E}), randn({B, H, S, E}), randn({B, H, S, Ev})};
  {
    SCOPED_TRACE("plain");
    expect_paths_agree(a);
  }
  {
    SCOPED_TRACE("bool mask [B, 1, L, S]");
    Args m = a;
    m.mask = rand({B, 1, L, S}) > 0.2;
    expect_paths_agree(m);
  }
  {
    SCOPED_TRACE("float mask [L, S] with grad");
    Args m = a;
    m.mask = randn({L, S}).requires_grad_(true);
    expect_paths_agree(m);
  }
  for (int64_t l : {L, S, int64_t(400)}) {
    SCOPED_TRACE("causal L = " + std::to_string(l));
    Args c = a;
    c.q = randn({B, H, l, E});
    c.causal = true;
    expect_paths_agree(c);
  }
  {
    SCOPED_TRACE("gqa 6 over 2 heads, scale 0.05");
    Args g{randn({B, 6, L, E}), randn({B, 2, S, E}), randn({B, 2, S, Ev})};
    g.gqa = true;
    g.scale = 0.05;
    expect_paths_agree(g);
  }
}

TEST(AttentionFusedVsExact, TinyTilesAndOddLayouts) {
  manual_seed(2);
  // MultiheadAttention's layout: [B, L, H, E] viewed as [B, H, L, E] (no copy in the fused path).
  const int64_t B = 2, H = 4, L = 37, S = 23, E = 8;
  Args a{transpose(randn({B, L, H, E}), 1, 2), transpose(randn({B, S, H, E}), 1, 2), transpose(randn({B, S, H, E}), 1, 2)};
  a.mask = rand({1, H, 1, S}) > 0.3;
  for (auto [bq, bk] : {std::pair<int64_t, int64_t>{4, 7}, {16, 16}, {37, 23}, {1, 1}}) {
    SCOPED_TRACE("tiles " + std::to_string(bq) + " x " + std::to_string(bk));
    expect_paths_agree(a, bq, bk);
    Args c = a;
    c.mask = Tensor();
    c.causal = true;
    expect_paths_agree(c, bq, bk);
  }
  // Key/value broadcast over the batch, a float mask [S] broadcasting everywhere, 2-D and 5-D.
  Args b{randn({3, 2, 9, 5}), randn({1, 2, 11, 5}), randn({2, 11, 4})};
  b.mask = randn({11}).requires_grad_(true);
  expect_paths_agree(b, 4, 4);
  expect_paths_agree(Args{randn({9, 5}), randn({13, 5}), randn({13, 3})}, 2, 4);
  expect_paths_agree(Args{randn({2, 1, 3, 9, 5}), randn({2, 1, 3, 13, 5}), randn({2, 1, 3, 13, 3})}, 4, 4);
}

TEST(AttentionFusedVsExact, FullyMaskedRowsGiveZerosAndZeroGradients) {
  manual_seed(3);
  Tensor mask = rand({6, 40}) > 0.5;
  mask = logical_and(mask, arange(6).unsqueeze(1) != 2);  // row 2 sees nothing
  Tensor fm = masked_fill(zeros({6, 40}), logical_not(mask), -std::numeric_limits<double>::infinity());
  for (const Tensor& m : {mask, fm}) {
    for (Path path : {Path::math, Path::flash, Path::flash_tiny_tiles}) {
      SCOPED_TRACE(std::string(path_name(path)) + (m.dtype() == kBool ? " bool" : " float"));
      Args a{randn({2, 6, 8}), randn({2, 40, 8}), randn({2, 40, 8}), m};
      const Result res = run(a, ones({2, 6, 8}), path, 4, 16);
      EXPECT_TRUE(all_close(res.out.select(1, 2), zeros({2, 8}), 0, 0));
      EXPECT_TRUE(all_close(res.dq.select(1, 2), zeros({2, 8}), 0, 0));
      EXPECT_EQ(sum(res.dk != res.dk).item<int64_t>(), 0) << "NaN in dk";
      EXPECT_EQ(sum(res.out != res.out).item<int64_t>(), 0) << "NaN in out";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Gradients against finite differences (float64)

TEST(AttentionGradcheck, BothPathsAndDoubleBackward) {
  manual_seed(4);
  auto check = [](const std::string& what, Args a, bool grad_grad) {
    std::vector<Tensor> inputs = {a.q.detach().requires_grad_(true), a.k.detach().requires_grad_(true), a.v.detach().requires_grad_(true)};
    const bool mask_grad = a.mask.defined() && a.mask.dtype() != kBool;
    if (mask_grad) inputs.push_back(a.mask.detach().requires_grad_(true));
    for (Path path : {Path::math, Path::flash_tiny_tiles}) {
      SCOPED_TRACE(what + " " + path_name(path));
      test::TensorFn f = [&](const std::vector<Tensor>& x) {
        std::optional<SDPAKernelGuard> backend;
        std::optional<detail::SdpaTilesGuard> tiles;
        backend.emplace(path == Path::math ? SDPBackend::math : SDPBackend::flash_attention);
        if (path == Path::flash_tiny_tiles) tiles.emplace(2, 3);
        return scaled_dot_product_attention(x[0], x[1], x[2], mask_grad ? x[3] : a.mask, 0.0, a.causal, a.scale, a.gqa);
      };
      test::GradcheckOptions o;
      o.check_grad_grad = grad_grad;
      EXPECT_TRUE(test::gradcheck(f, inputs, o));
    }
  };
  const auto rl = [](IntArrayRef s) { return test::rand_leaf(s); };
  check("plain", Args{rl({2, 5, 3}), rl({2, 7, 3}), rl({2, 7, 2})}, true);
  Args causal{rl({1, 2, 7, 3}), rl({1, 2, 5, 3}), rl({1, 2, 5, 2})};
  causal.causal = true;
  check("causal L > S", causal, true);
  Args fm{rl({2, 4, 3}), rl({2, 6, 3}), rl({2, 6, 2})};
  fm.mask = rl({4, 6});
  check("float mask", fm, true);
  Args bm{rl({2, 4, 3}), rl({2, 6, 3}), rl({2, 6, 2})};
  bm.mask = rand({2, 1, 6}) > 0.3;
  check("bool mask", bm, false);
  Args g{rl({1, 4, 3, 2}), rl({1, 2, 5, 2}), rl({1, 1, 5, 2})};
  g.gqa = true;
  g.scale = 0.7;
  check("gqa", g, false);
}

// ---------------------------------------------------------------------------------------------
// Dropout

TEST(AttentionDropout, SeededAndRateAndPOne) {
  const int64_t L = 64, S = 256;
  // q = 0: uniform weights 1/S; v = identity: out[i, j] = dropped-or-kept weight (i, j).
  Tensor q = zeros({2, L, 8}), k = randn({2, S, 8}), v = eye(S).unsqueeze(0).expand({2, S, S}).contiguous();
  manual_seed(11);
  Tensor a = scaled_dot_product_attention(q, k, v, Tensor(), 0.3);
  manual_seed(11);
  Tensor b = scaled_dot_product_attention(q, k, v, Tensor(), 0.3);
  EXPECT_TRUE(all_close(a, b, 0, 0)) << "one seed, one mask";
  Tensor c = scaled_dot_product_attention(q, k, v, Tensor(), 0.3);
  EXPECT_FALSE(equal(a, c)) << "the generator moved on";
  const double zeros_frac = (a == 0.0).to(kFloat64).mean().item<double>();
  EXPECT_NEAR(zeros_frac, 0.3, 0.01);  // 32768 draws: sd 0.0025
  // Kept weights are (1/S) / (1 - p).
  const double kept = max(a).item<double>();
  EXPECT_NEAR(kept, 1.0 / S / 0.7, 1e-6);
  // p = 1: zeros.
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, Tensor(), 1.0), zeros({2, L, S}), 0, 0));
  // The gradient goes through the same mask: d(sum(out * r))/dv = P_dropped^T r.
  Tensor vv = v.detach().requires_grad_(true);
  manual_seed(11);
  Tensor out = scaled_dot_product_attention(q, k, vv, Tensor(), 0.3);
  EXPECT_NE(std::string(out.grad_fn()->name()), kFused);
  Tensor r = randn(out.sizes());
  sum(out * r).backward();
  // out = P_dropped @ I = P_dropped, so dv = out^T r.
  EXPECT_TRUE(all_close(vv.grad(), matmul(transpose(a, 1, 2), r), 1e-5, 1e-6));
  // The flash backend cannot run dropout.
  SDPAKernelGuard flash(SDPBackend::flash_attention);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, Tensor(), 0.1), NotImplementedError);
}

// ---------------------------------------------------------------------------------------------
// Layouts, dtypes, edge cases

TEST(Attention, OutputLayoutAndFunctional) {
  manual_seed(5);
  Tensor q = randn({2, 3, 10, 4}), k = randn({2, 3, 12, 4}), v = randn({2, 3, 12, 5});
  Tensor out;
  {
    SDPAKernelGuard flash(SDPBackend::flash_attention);
    out = nn::functional::scaled_dot_product_attention(q, k, v);
  }
  EXPECT_EQ(out.sizes(), Shape({2, 3, 10, 5}));
  // Laid out [B, L, H, Ev], as PyTorch's CPU flash kernel: the transpose back is contiguous.
  EXPECT_TRUE(out.transpose(1, 2).is_contiguous());
  // The gradients take their inputs' layouts: contiguous, or heads inside rows (MultiheadAttention's
  // q.view(B, L, H, E).transpose(1, 2)).
  Tensor qc = q.detach().requires_grad_(true);
  Tensor base = randn({2, 12, 3, 4}).requires_grad_(true);
  Tensor kt = base.transpose(1, 2);
  std::vector<Tensor> grads;
  {
    SDPAKernelGuard flash(SDPBackend::flash_attention);
    grads = autograd::grad({scaled_dot_product_attention(qc, kt, v)}, {qc, kt}, {ones_like(out)});
  }
  EXPECT_TRUE(grads[0].is_contiguous());
  EXPECT_TRUE(grads[1].transpose(1, 2).is_contiguous());
  Tensor expected;
  {
    SDPAKernelGuard math(SDPBackend::math);
    expected = scaled_dot_product_attention(q, k, v);
  }
  EXPECT_TRUE(all_close(out, expected, 1e-5, 1e-6));
  // The reference formula itself.
  EXPECT_TRUE(all_close(out, matmul(softmax(matmul(q, k.transpose(-2, -1)) / 2.0, -1), v), 1e-5, 1e-6));
}

TEST(Attention, AutomaticChoice) {
  auto grad_fn = [](const Tensor& q, const Tensor& k, bool causal, const Tensor& mask = Tensor()) {
    Tensor qq = q.detach().requires_grad_(true);
    return std::string(scaled_dot_product_attention(qq, k, k, mask, 0.0, causal).grad_fn()->name());
  };
  Tensor short_q = randn({2, 64, 16}), long_q = randn({2, 300, 16});
  EXPECT_NE(grad_fn(short_q, short_q, false), kFused);  // short and unmasked: exact (no recomputation)
  EXPECT_EQ(grad_fn(short_q, short_q, true), kFused);
  EXPECT_EQ(grad_fn(short_q, short_q, false, rand({64, 64}) > 0.5), kFused);
  EXPECT_EQ(grad_fn(long_q, long_q, false), kFused);
}

TEST(Attention, BFloat16ComputesInFloat32) {
  manual_seed(6);
  Tensor q = randn({2, 2, 40, 16}).to(kBFloat16), k = randn({2, 2, 50, 16}).to(kBFloat16), v = randn({2, 2, 50, 16}).to(kBFloat16);
  Tensor mask = rand({40, 50}) > 0.2;
  for (Path path : {Path::automatic, Path::math}) {
    SCOPED_TRACE(path_name(path));
    Args a{q, k, v, mask};
    Tensor r = randn({2, 2, 40, 16}).to(kBFloat16);
    const Result got = run(a, r, path);
    Args f{q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), mask};
    const Result want = run(f, r.to(kFloat32), Path::math);
    EXPECT_EQ(got.out.dtype(), kBFloat16);
    EXPECT_EQ(got.dq.dtype(), kBFloat16);
    EXPECT_TRUE(all_close(got.out, want.out, 1e-2, 1e-2));
    EXPECT_TRUE(all_close(got.dq, want.dq, 2e-2, 2e-2));
    EXPECT_TRUE(all_close(got.dk, want.dk, 2e-2, 2e-2));
    EXPECT_TRUE(all_close(got.dv, want.dv, 2e-2, 2e-2));
    if (path == Path::automatic) {
      EXPECT_EQ(got.grad_fn, kFused);
    }
  }
}

TEST(Attention, EmptySizes) {
  for (Path path : {Path::math, Path::flash}) {
    SCOPED_TRACE(path_name(path));
    // No keys: zeros (every row fully masked), zero gradients.
    Args none{randn({2, 3, 4}), randn({2, 0, 4}), randn({2, 0, 5})};
    Result r = run(none, ones({2, 3, 5}), path);
    EXPECT_TRUE(all_close(r.out, zeros({2, 3, 5}), 0, 0));
    EXPECT_TRUE(all_close(r.dq, zeros({2, 3, 4}), 0, 0));
    // No queries, no batch.
    EXPECT_EQ(run(Args{randn({2, 0, 4}), randn({2, 6, 4}), randn({2, 6, 5})}, ones({2, 0, 5}), path).out.sizes(), Shape({2, 0, 5}));
    Result e = run(Args{randn({0, 3, 4}), randn({0, 6, 4}), randn({0, 6, 5})}, ones({0, 3, 5}), path);
    EXPECT_EQ(e.out.sizes(), Shape({0, 3, 5}));
    EXPECT_EQ(e.dk.sizes(), Shape({0, 6, 4}));
  }
}

// ---------------------------------------------------------------------------------------------
// Threads and memory

TEST(Attention, HostThreadsOrTheWorkersOwn) {
  manual_seed(7);
  const int before = get_num_threads();
  set_num_threads(2);
  Tensor q = randn({2, 4, 200, 32}), k = randn({2, 4, 300, 32}), v = randn({2, 4, 300, 32});
  const int64_t calls = backend::cpu::blas::pool_calls();
  Tensor host = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1) << "one parallel_for over the host pool";
  // On a device worker (a DataParallel replica's thread) everything stays in that thread.
  Tensor qd = q.to(Device("cpu:0")), kd = k.to(Device("cpu:0")), vd = v.to(Device("cpu:0"));
  Tensor dev = worker_for(Device("cpu:0"))->submit([&] { return scaled_dot_product_attention(qd, kd, vd, Tensor(), 0.0, true); }).get();
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1);
  EXPECT_EQ(dev.device(), Device("cpu:0"));
  EXPECT_TRUE(all_close(dev.to(Device::cpu()), host, 1e-6, 1e-7));
  set_num_threads(before);
}

// The host pool primitive the kernels use: every task once, slots in range and never shared at
// once, errors rethrown, and the calling thread alone on a device worker.
TEST(BlasParallelFor, TasksSlotsErrorsAndWorkers) {
  const int before = get_num_threads();
  set_num_threads(3);
  EXPECT_EQ(backend::cpu::blas::parallel_slots(), 3);
  for (int slots : {1, 2, 3, 8}) {
    SCOPED_TRACE(slots);
    std::vector<std::atomic<int>> seen(1000);
    std::vector<std::atomic<int>> busy(16);
    std::atomic<bool> bad_slot{false}, shared{false};
    backend::cpu::blas::parallel_for(1000, slots, [&](int64_t t, int slot) {
      if (slot < 0 || slot >= std::min(slots, 3)) bad_slot = true;
      if (busy[slot].fetch_add(1) != 0) shared = true;
      seen[t].fetch_add(1);
      busy[slot].fetch_sub(1);
    });
    EXPECT_FALSE(bad_slot);
    EXPECT_FALSE(shared);
    int once = 0;
    for (auto& s : seen) once += s.load() == 1;
    EXPECT_EQ(once, 1000);
  }
  EXPECT_THROW(backend::cpu::blas::parallel_for(100, 3,
                                                [](int64_t t, int) {
                                                  if (t == 37) throw ValueError("task 37");
                                                }),
               ValueError);
  const int on_worker = worker_for(Device("cpu:0"))->submit([] { return backend::cpu::blas::parallel_slots(); }).get();
  EXPECT_EQ(on_worker, 1);
  set_num_threads(before);
}

TEST(Attention, FusedMemoryIsLinearInTheSequence) {
  // L = S = 1024, d = 64, one problem: the materialised weights alone are 1024 * 1024 * 4 bytes.
  manual_seed(8);
  const int64_t T = 1024, d = 64, naive = T * T * 4;
  Tensor q = randn({1, 1, T, d}).requires_grad_(true), k = randn({1, 1, T, d}).requires_grad_(true), v = randn({1, 1, T, d}).requires_grad_(true);
  const Device host = Device::cpu();
  auto peak_extra = [&](const std::function<void()>& fn) {
    reset_peak_memory_stats(host);
    const int64_t base = memory_stats(host).allocated;
    fn();
    return memory_stats(host).peak_allocated - base;
  };
  Tensor out;
  const int64_t fwd = peak_extra([&] { out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true); });
  const Tensor r = randn({1, 1, T, d});
  const int64_t bwd = peak_extra([&] { sum(out * r).backward(); });
  // Output, log-sum-exp and per-thread tiles (forward); the gradients, the loss's own tensors and
  // per-thread tiles (backward): O(T * d), under a quarter of the naive matrix.
  std::cout << "fused attention peak extra memory: forward " << fwd << " B, backward " << bwd << " B (naive weights " << naive << " B)\n";
  EXPECT_LT(fwd, naive / 4);
  EXPECT_LT(bwd, naive / 2);
  // The exact path does hold the matrix (the measurement sees it).
  Tensor q2 = q.detach(), k2 = k.detach(), v2 = v.detach();
  SDPAKernelGuard math(SDPBackend::math);
  EXPECT_GE(peak_extra([&] { scaled_dot_product_attention(q2, k2, v2, Tensor(), 0.0, true); }), naive);
}

// ---------------------------------------------------------------------------------------------
// Errors

template <typename E, typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing: " << part;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Attention, Errors) {
  Tensor q = randn({2, 3, 4, 8}), k = randn({2, 3, 5, 8}), v = randn({2, 3, 5, 6});
  auto sdpa = [](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& m = Tensor(), double p = 0.0, bool causal = false,
                 bool gqa = false) { return scaled_dot_product_attention(a, b, c, m, p, causal, std::nullopt, gqa); };
  expect_error<ShapeError>(
      [&] {
        sdpa(q, randn({2, 3, 5, 7}), v);
      },
      "scaled_dot_product_attention: query and key must have the same embedding size (last dim), got query [2, 3, 4, 8], key [2, 3, 5, 7]");
  expect_error<ShapeError>(
      [&] {
        sdpa(q, k, randn({2, 3, 6, 6}));
      },
      "key and value must have the same sequence length (dim -2), got query [2, 3, 4, 8], key [2, 3, 5, 8] and value [2, 3, 6, 6]");
  expect_error<ShapeError>(
      [&] {
        sdpa(q, randn({3, 3, 5, 8}), randn({3, 3, 5, 6}));
      },
      "the leading (batch and head) dims of query [2, 3, 4, 8], key [3, 3, 5, 8] and value [3, 3, 5, 6] do not broadcast");
  expect_error<ShapeError>([&] { sdpa(q, randn({2, 2, 5, 8}), randn({2, 2, 5, 6})); }, "do not broadcast");
  expect_error<ShapeError>(
      [&] {
        sdpa(q, randn({2, 2, 5, 8}), randn({2, 2, 5, 6}), Tensor(), 0.0, false, true);
      },
      "with enable_gqa the number of heads in key and value must divide the number of heads in query, got 3 query heads, 2 key heads and 2 value "
      "heads");
  expect_error<ShapeError>(
      [&] {
        sdpa(randn({4, 8}), randn({5, 8}), randn({5, 6}), Tensor(), 0.0, false, true);
      },
      "enable_gqa needs a heads dim (-3)");
  expect_error<ShapeError>(
      [&] {
        sdpa(randn({8}), randn({5, 8}), randn({5, 6}));
      },
      "expected query, key and value to be at least 2-D, got query [8]");
  expect_error<ShapeError>(
      [&] {
        sdpa(q, k, v, ones({4, 4}, kBool));
      },
      "attn_mask of shape [4, 4] does not broadcast to the attention weights' shape [2, 3, 4, 5]");
  expect_error<ShapeError>([&] { sdpa(q, k, v, ones({3, 2, 3, 4, 5}, kBool)); }, "attn_mask of shape [3, 2, 3, 4, 5] does not broadcast");
  expect_error<DTypeError>(
      [&] {
        sdpa(q, k, v, ones({4, 5}, kInt64));
      },
      "expected attn_mask dtype to be bool or float or to match query dtype, got attn_mask of dtype int64 and query of dtype float32");
  expect_error<DTypeError>(
      [&] { sdpa(q, k.to(kFloat64), v); },
      "expected query, key and value to have the same dtype, but got query.dtype: float32, key.dtype: float64 and value.dtype: float32");
  expect_error<DTypeError>(
      [&] {
        sdpa(ones({4, 8}, kInt64), ones({5, 8}, kInt64), ones({5, 6}, kInt64));
      },
      "expected floating point query, key and value, got query of dtype int64");
  expect_error<ValueError>([&] { sdpa(q, k, v, ones({4, 5}, kBool), 0.0, true); }, "explicit attn_mask should not be set when is_causal=True");
  expect_error<ValueError>([&] { sdpa(q, k, v, Tensor(), 1.5); }, "dropout_p has to be between 0 and 1, but got 1.5");
  expect_error<ValueError>([&] { sdpa(Tensor(), k, v); }, "scaled_dot_product_attention: query is an undefined tensor");
  expect_error<DeviceError>([&] { sdpa(q, k.to(Device("cpu:0")), v); },
                            "expected all tensors to be on the same device, but found at least two devices, cpu and cpu:0");
  expect_error<DeviceError>([&] { sdpa(q, k, v, ones({4, 5}, kBool).to(Device("cpu:1"))); }, "found at least two devices");
}

}  // namespace
}  // namespace dp
