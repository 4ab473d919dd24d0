// layer_norm and batch_norm: forward, backward and running-stat updates against PyTorch's
// (tests/golden/gen_normalization.py), finite-difference gradcheck and double backward in float64,
// larger shapes (the multi-threaded paths) against a float64 reference, non-contiguous inputs,
// in-place running-stat updates on the given tensors, concurrent calls, and error messages.
#include <gtest/gtest.h>
#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include "backend/cpu/reduce.h"
#include "dp/ops/normalization.h"
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;
using test::gradcheck;
using test::json;
using test::rand_leaf;

const json& all_cases() { return test::golden_file("normalization.json").at("cases"); }

std::vector<const json*> cases_of(const std::string& op) {
  std::vector<const json*> out;
  for (const json& c : all_cases())
    if (c.at("op") == op) out.push_back(&c);
  return out;
}

bool has(const json& c, const char* name) { return c.at("tensors").contains(name); }
// The named tensor of a case, or an undefined tensor when the case has none.
Tensor get(const json& c, const char* name, bool requires_grad = false) {
  return has(c, name) ? test::tensor_from_json(c.at("tensors").at(name), requires_grad) : Tensor();
}
const json& expected(const json& c, const char* name) { return c.at("tensors").at(name); }

// Tolerances: float32 results against PyTorch's float32 (different summation order).
double rtol_of(const Tensor& t) { return t.dtype() == kFloat64 ? 1e-10 : 1e-4; }
double atol_of(const Tensor& t) { return t.dtype() == kFloat64 ? 1e-12 : 2e-5; }

Tensor randn_f(const Shape& shape, uint32_t seed, double scale = 1.0, double shift = 0.0, DType dt = kFloat32) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (double& e : v) e = nd(gen) * scale + shift;
  return tensor<double>(v, shape).to(dt);
}

// ---------------------------------------------------------------- layer_norm goldens

TEST(LayerNorm, GoldenForwardAndBackward) {
  auto cases = cases_of("layer_norm");
  ASSERT_GE(cases.size(), 8u);
  for (const json* cp : cases) {
    const json& c = *cp;
    SCOPED_TRACE(c.at("name").get<std::string>());
    Tensor x = get(c, "x", true), w = get(c, "weight", true), b = get(c, "bias", true);
    const Shape ns = c.at("args").at("normalized_shape").get<Shape>();
    const double eps = c.at("args").at("eps").get<double>();
    Tensor out = layer_norm(x, ns, w, b, eps);
    EXPECT_EQ(out.dtype(), x.dtype());
    const bool large = c.at("name") == "ln_large_mean";
    EXPECT_TRUE(all_close(out, expected(c, "out"), rtol_of(x), large ? 1e-4 : atol_of(x)));
    ASSERT_TRUE(out.requires_grad());
    EXPECT_EQ(out.grad_fn()->name(), "NativeLayerNormBackward0");
    std::vector<Tensor> leaves{x};
    if (w.defined()) leaves.push_back(w);
    if (b.defined()) leaves.push_back(b);
    auto grads = autograd::grad({out}, leaves, {get(c, "grad_out")});
    EXPECT_TRUE(all_close(grads[0], expected(c, "grad_x"), rtol_of(x), large ? 1e-4 : atol_of(x)));
    size_t k = 1;
    if (w.defined()) {
      EXPECT_TRUE(all_close(grads[k++], expected(c, "grad_weight"), rtol_of(x), large ? 2e-4 : atol_of(x)));
    }
    if (b.defined()) {
      EXPECT_TRUE(all_close(grads[k++], expected(c, "grad_bias"), rtol_of(x), atol_of(x)));
    }
  }
}

// ---------------------------------------------------------------- batch_norm goldens

TEST(BatchNorm, GoldenForwardBackwardAndRunningStats) {
  auto cases = cases_of("batch_norm");
  ASSERT_GE(cases.size(), 15u);
  for (const json* cp : cases) {
    const json& c = *cp;
    SCOPED_TRACE(c.at("name").get<std::string>());
    Tensor x = get(c, "x", true), w = get(c, "weight", true), b = get(c, "bias", true);
    Tensor rm = get(c, "running_mean"), rv = get(c, "running_var");
    TensorImpl* rm_impl = rm.defined() ? rm.unsafe_impl() : nullptr;
    const uint32_t rm_version = rm.defined() ? rm.version() : 0;
    const bool training = c.at("args").at("training").get<bool>();
    Tensor out = batch_norm(x, rm, rv, w, b, training, c.at("args").at("momentum").get<double>(), c.at("args").at("eps").get<double>());
    const bool large = c.at("name") == "bn_train_large_mean";
    EXPECT_TRUE(all_close(out, expected(c, "out"), rtol_of(x), large ? 1e-4 : atol_of(x)));
    if (has(c, "new_running_mean")) {
      // Updated in place: the same tensor, its version bumped in training only.
      EXPECT_EQ(rm.unsafe_impl(), rm_impl);
      EXPECT_TRUE(all_close(rm, expected(c, "new_running_mean"), 1e-5, large ? 1e-5 : 1e-6));
      EXPECT_TRUE(all_close(rv, expected(c, "new_running_var"), 1e-5, 1e-6));
      if (training)
        EXPECT_GT(rm.version(), rm_version);
      else
        EXPECT_EQ(rm.version(), rm_version);
    }
    std::vector<Tensor> leaves{x};
    if (w.defined()) leaves.push_back(w);
    if (b.defined()) leaves.push_back(b);
    EXPECT_EQ(out.grad_fn()->name(), "NativeBatchNormBackward0");
    auto grads = autograd::grad({out}, leaves, {get(c, "grad_out")});
    EXPECT_TRUE(all_close(grads[0], expected(c, "grad_x"), rtol_of(x), large ? 1e-4 : atol_of(x)));
    size_t k = 1;
    if (w.defined()) {
      EXPECT_TRUE(all_close(grads[k++], expected(c, "grad_weight"), rtol_of(x), large ? 2e-4 : 5e-5));
    }
    if (b.defined()) {
      EXPECT_TRUE(all_close(grads[k++], expected(c, "grad_bias"), rtol_of(x), atol_of(x)));
    }
  }
}

// ---------------------------------------------------------------- gradcheck (float64)

TEST(LayerNorm, Gradcheck) {
  Tensor x = rand_leaf({3, 4, 5}, -2, 2);
  Tensor w = rand_leaf({4, 5}, 0.5, 1.5), b = rand_leaf({4, 5});
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return layer_norm(t[0], {4, 5}, t[1], t[2]); }, {x, w, b}));
  Tensor w1 = rand_leaf({5}, 0.5, 1.5), b1 = rand_leaf({5});
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return layer_norm(t[0], {5}, t[1], t[2], 1e-3); }, {x, w1, b1}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return layer_norm(t[0], {5}); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return layer_norm(t[0], {5}, t[1]); }, {x, w1}));
  // A non-contiguous input (the transpose of a [5, 3] leaf).
  Tensor xt = backend::restride_nograd(rand({5, 3}, kFloat64), {3, 5}, {1, 3}).requires_grad_(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return layer_norm(t[0], {5}, t[1], t[2]); }, {xt, w1, b1}));
}

TEST(BatchNorm, GradcheckTraining) {
  for (Shape shape : {Shape{4, 3}, Shape{3, 2, 4}, Shape{2, 3, 2, 2}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t C = shape[1];
    Tensor x = rand_leaf(shape, -2, 2);
    Tensor w = rand_leaf({C}, 0.5, 1.5), b = rand_leaf({C});
    // Fresh running buffers per call: the function must not depend on earlier evaluations.
    auto f = [C](const std::vector<Tensor>& t) {
      Tensor rm = zeros({C}, kFloat64), rv = ones({C}, kFloat64);
      return batch_norm(t[0], rm, rv, t[1], t[2], true, 0.1, 1e-5);
    };
    EXPECT_TRUE(gradcheck(f, {x, w, b}));
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return batch_norm(t[0], {}, {}, {}, {}, true); }, {x}));
  }
}

TEST(BatchNorm, GradcheckEval) {
  Tensor x = rand_leaf({3, 4, 2}, -2, 2);
  Tensor w = rand_leaf({4}, 0.5, 1.5), b = rand_leaf({4});
  Tensor rm = rand({4}, kFloat64), rv = rand({4}, kFloat64) + 0.5;
  EXPECT_TRUE(gradcheck([rm, rv](const std::vector<Tensor>& t) { return batch_norm(t[0], rm, rv, t[1], t[2], false); }, {x, w, b}));
}

// Second derivatives: the create_graph backward (dp ops) differentiated by finite differences.
::testing::AssertionResult check_grad_grad(const test::TensorFn& f, const std::vector<Tensor>& inputs) {
  Tensor v = rand(f(inputs).sizes(), kFloat64);
  test::TensorFn first = [f, v](const std::vector<Tensor>& xs) {
    AutoGradMode on(true);
    std::vector<Tensor> leaves;
    for (const Tensor& t : xs) leaves.push_back(t.requires_grad() ? t : t.detach().requires_grad_(true));
    Tensor y = f(leaves);
    auto g = autograd::grad({y}, leaves, {v}, /*retain_graph=*/true, /*create_graph=*/true);
    // One output: the gradients concatenated.
    std::vector<Tensor> flat;
    for (const Tensor& gi : g) flat.push_back(gi.reshape({-1}));
    return cat(flat, 0);
  };
  return gradcheck(first, inputs);
}

TEST(LayerNorm, DoubleBackward) {
  Tensor x = rand_leaf({2, 5}, -2, 2), w = rand_leaf({5}, 0.5, 1.5), b = rand_leaf({5});
  EXPECT_TRUE(check_grad_grad([](const std::vector<Tensor>& t) { return layer_norm(t[0], {5}, t[1], t[2]); }, {x, w, b}));
}

TEST(BatchNorm, DoubleBackward) {
  Tensor x = rand_leaf({3, 2, 2}, -2, 2), w = rand_leaf({2}, 0.5, 1.5), b = rand_leaf({2});
  EXPECT_TRUE(check_grad_grad([](const std::vector<Tensor>& t) { return batch_norm(t[0], {}, {}, t[1], t[2], true); }, {x, w, b}));
  Tensor rm = rand({2}, kFloat64), rv = rand({2}, kFloat64) + 0.5;
  EXPECT_TRUE(check_grad_grad([rm, rv](const std::vector<Tensor>& t) { return batch_norm(t[0], rm, rv, t[1], t[2], false); }, {x, w, b}));
}

// The fused backward against the dp-op formula used under create_graph (bigger shapes).
TEST(Normalization, FusedBackwardMatchesCreateGraphFormula) {
  Tensor x = randn_f({64, 3, 50}, 1, 2.0, 1.0).requires_grad_(true);
  Tensor w = randn_f({3}, 2, 0.3, 1.0).requires_grad_(true), b = randn_f({3}, 3).requires_grad_(true);
  Tensor g = randn_f({64, 3, 50}, 4);
  Tensor y = batch_norm(x, {}, {}, w, b, true);
  auto fused = autograd::grad({y}, {x, w, b}, {g}, /*retain_graph=*/true);
  auto formula = autograd::grad({y}, {x, w, b}, {g}, /*retain_graph=*/false, /*create_graph=*/true);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(fused[i], formula[i].detach(), 1e-4, 1e-5)) << i;

  Tensor wl = randn_f({50}, 5, 0.3, 1.0).requires_grad_(true), bl = randn_f({50}, 6).requires_grad_(true);
  Tensor yl = layer_norm(x, {50}, wl, bl);
  auto lf = autograd::grad({yl}, {x, wl, bl}, {g}, true);
  auto lg = autograd::grad({yl}, {x, wl, bl}, {g}, false, true);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(lf[i], lg[i].detach(), 1e-4, 1e-5)) << i;
}

// ---------------------------------------------------------------- larger shapes vs float64

// layer_norm in float64 with plain loops.
Tensor reference_layer_norm(const Tensor& x, int64_t N, const Tensor& w, const Tensor& b, double eps) {
  std::vector<double> v = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  const int64_t M = x.numel() / N;
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < M; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < N; ++i) mu += v[r * N + i];
    mu /= N;
    for (int64_t i = 0; i < N; ++i) var += (v[r * N + i] - mu) * (v[r * N + i] - mu);
    var /= N;
    for (int64_t i = 0; i < N; ++i) out[r * N + i] = (v[r * N + i] - mu) / std::sqrt(var + eps) * wv[i] + bv[i];
  }
  return tensor<double>(out, x.sizes());
}

TEST(LayerNorm, LargeMatchesFloat64Reference) {
  // 512 x 1024: above the threshold where rows are split over threads.
  Tensor x = randn_f({512, 1024}, 7, 3.0, 2.0);
  Tensor w = randn_f({1024}, 8, 0.2, 1.0), b = randn_f({1024}, 9, 0.1);
  EXPECT_TRUE(all_close(layer_norm(x, {1024}, w, b), reference_layer_norm(x, 1024, w, b, 1e-5), 1e-5, 2e-5));
  Tensor xd = x.to(kFloat64);
  EXPECT_TRUE(all_close(layer_norm(xd, {1024}, w.to(kFloat64), b.to(kFloat64)), reference_layer_norm(x, 1024, w, b, 1e-5), 1e-12, 1e-12));
  // The weight gradient summed over the rows: threads' partial sums agree with one pass.
  Tensor xl = xd.detach().requires_grad_(true), wl = w.to(kFloat64).requires_grad_(true), bl = b.to(kFloat64).requires_grad_(true);
  Tensor g = randn_f({512, 1024}, 10, 1.0, 0.0, kFloat64);
  auto fused = autograd::grad({layer_norm(xl, {1024}, wl, bl)}, {xl, wl, bl}, {g});
  auto formula = autograd::grad({layer_norm(xl, {1024}, wl, bl)}, {xl, wl, bl}, {g}, false, true);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(fused[i], formula[i].detach(), 1e-10, 1e-10)) << i;
}

TEST(BatchNorm, LargeMatchesFloat64) {
  // [N, C] (channels inner) and [N, C, L] layouts, big enough for the threaded path.
  for (Shape shape : {Shape{4096, 256}, Shape{16, 64, 784}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t C = shape[1];
    Tensor x = randn_f(shape, 11, 2.0, 3.0);
    Tensor w = randn_f({C}, 12, 0.2, 1.0), b = randn_f({C}, 13, 0.1);
    Tensor rm = zeros({C}), rv = ones({C});
    Tensor rmd = zeros({C}, kFloat64), rvd = ones({C}, kFloat64);
    Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
    Tensor yd = batch_norm(x.to(kFloat64), rmd, rvd, w.to(kFloat64), b.to(kFloat64), true, 0.1, 1e-5);
    EXPECT_TRUE(all_close(y, yd, 1e-5, 2e-5));
    EXPECT_TRUE(all_close(rm, rmd, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(rv, rvd, 1e-6, 1e-6));
    // Against the definition with dp reductions in float64.
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    Tensor xd = x.to(kFloat64);
    Shape bshape(shape.size(), 1);
    bshape[1] = C;
    Tensor mu = mean(xd, dims, true), var_b = var(xd, dims, 0, true);
    Tensor ref = (xd - mu) / sqrt(var_b + 1e-5) * w.to(kFloat64).reshape(bshape) + b.to(kFloat64).reshape(bshape);
    EXPECT_TRUE(all_close(yd, ref, 1e-10, 1e-10));
    EXPECT_TRUE(all_close(rvd, var(xd, dims, 1, false) * 0.1 + 0.9, 1e-10, 1e-12));
  }
}

// ---------------------------------------------------------------- layout and in-place behaviour

TEST(BatchNorm, NonContiguousInputAndBuffers) {
  Tensor base = randn_f({3, 5, 4}, 20);
  Tensor x = base.permute({2, 1, 0});  // [4, 5, 3], not contiguous
  ASSERT_FALSE(x.is_contiguous());
  Tensor xc = x.contiguous();
  // Running buffers that are strided views into a bigger tensor: updated through the view.
  Tensor store = zeros({5, 2});
  Tensor rm = store.select(1, 0), rv = store.select(1, 1);
  rv.fill_(1.0);
  ASSERT_FALSE(rm.is_contiguous());
  Tensor rm2 = zeros({5}), rv2 = ones({5});
  Tensor y = batch_norm(x, rm, rv, {}, {}, true, 0.1, 1e-5);
  Tensor y2 = batch_norm(xc, rm2, rv2, {}, {}, true, 0.1, 1e-5);
  EXPECT_TRUE(all_close(y, y2, 0, 0));
  EXPECT_TRUE(all_close(store.select(1, 0), rm2, 0, 0));
  EXPECT_TRUE(all_close(store.select(1, 1), rv2, 0, 0));
  Tensor lx = layer_norm(x, {3});
  EXPECT_TRUE(all_close(lx, layer_norm(xc, {3}), 0, 0));
}

TEST(BatchNorm, RunningStatsUpdatedOnTheGivenTensors) {
  // An alias of the buffers (another handle to the same TensorImpl) sees the update.
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor alias_m = rm, alias_v = rv;
  Tensor x = randn_f({6, 3}, 21);
  batch_norm(x, rm, rv, {}, {}, true, 0.5);
  EXPECT_TRUE(alias_m.is_same(rm));
  Tensor mu = mean(x, {0}) * 0.5;
  Tensor var_u = var(x, {0}, 1) * 0.5 + 0.5;
  EXPECT_TRUE(all_close(alias_m, mu, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(alias_v, var_u, 1e-6, 1e-7));
  // Eval leaves them alone; momentum 0 leaves them alone too.
  Tensor before_m = rm.clone(), before_v = rv.clone();
  batch_norm(x, rm, rv, {}, {}, false);
  batch_norm(x, rm, rv, {}, {}, true, 0.0);
  EXPECT_TRUE(all_close(rm, before_m, 0, 0));
  EXPECT_TRUE(all_close(rv, before_v, 0, 0));
  // float64 running buffers with a float32 input are updated in their own dtype.
  Tensor rmd = zeros({3}, kFloat64), rvd = ones({3}, kFloat64);
  batch_norm(x, rmd, rvd, {}, {}, true, 0.5);
  EXPECT_EQ(rmd.dtype(), kFloat64);
  EXPECT_TRUE(all_close(rmd, mu, 1e-6, 1e-7));
}

TEST(BatchNorm, EvalBackwardUsesStatsAtForwardTime) {
  // The running stats are copied for the backward: changing them afterwards changes nothing.
  Tensor x = randn_f({4, 2}, 22).requires_grad_(true);
  Tensor rm = tensor<float>({0.5f, -0.5f}), rv = tensor<float>({2.0f, 0.5f});
  Tensor y = batch_norm(x, rm, rv, {}, {}, false);
  rv.fill_(100.0);
  sum(y).backward();
  std::vector<double> g = x.grad().to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(g[2 * i], 1.0 / std::sqrt(2.0 + 1e-5), 1e-6);
    EXPECT_NEAR(g[2 * i + 1], 1.0 / std::sqrt(0.5 + 1e-5), 1e-6);
  }
}

TEST(BatchNorm, ConcurrentCallsOnDifferentTensors) {
  // Several threads, each with its own input and buffers (as DataParallel replicas): every result
  // equals the same call made alone.
  constexpr int kThreads = 6;
  std::vector<Tensor> xs, rms, rvs, expect_y, expect_m, expect_v;
  for (int t = 0; t < kThreads; ++t) {
    xs.push_back(randn_f({32, 8, 30}, 100 + t, 1.0 + t, t));
    Tensor rm = zeros({8}), rv = ones({8});
    expect_y.push_back(batch_norm(xs[t], rm, rv, {}, {}, true));
    expect_m.push_back(rm);
    expect_v.push_back(rv);
    rms.push_back(zeros({8}));
    rvs.push_back(ones({8}));
  }
  std::vector<Tensor> ys(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      try {
        ys[t] = batch_norm(xs[t], rms[t], rvs[t], {}, {}, true);
      } catch (...) {
        ++failures;
      }
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(all_close(ys[t], expect_y[t], 0, 0)) << t;
    EXPECT_TRUE(all_close(rms[t], expect_m[t], 0, 0)) << t;
    EXPECT_TRUE(all_close(rvs[t], expect_v[t], 0, 0)) << t;
  }
}

TEST(Normalization, NoGradRecordsNothing) {
  Tensor x = randn_f({4, 3}, 30).requires_grad_(true);
  NoGradGuard no_grad;
  EXPECT_FALSE(layer_norm(x, {3}).requires_grad());
  EXPECT_FALSE(batch_norm(x, {}, {}, {}, {}, true).requires_grad());
}

TEST(BatchNorm, EmptyBatch) {
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(zeros({0, 3, 4}), rm, rv, {}, {}, true);
  EXPECT_EQ(y.sizes(), (Shape{0, 3, 4}));
  EXPECT_TRUE(all_close(rm, zeros({3}), 0, 0));
  EXPECT_TRUE(all_close(rv, ones({3}), 0, 0));
}

// ---------------------------------------------------------------- errors

template <typename E, typename F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << fragment;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(BatchNorm, Errors) {
  Tensor rm = zeros({3}), rv = ones({3});
  expect_error<ValueError>(
      [&] {
        batch_norm(zeros({1, 3}), rm, rv, {}, {}, true);
      },
      "Expected more than 1 value per channel when training, got input size torch.Size([1, 3])");
  expect_error<ValueError>(
      [&] {
        batch_norm(zeros({1, 3, 1, 1}), {}, {}, {}, {}, true);
      },
      "Expected more than 1 value per channel when training, got input size torch.Size([1, 3, 1, 1])");
  EXPECT_NO_THROW(batch_norm(zeros({1, 3}), rm, rv, {}, {}, false));  // eval: fine
  expect_error<ShapeError>([&] { batch_norm(zeros({4, 3}), zeros({4}), rv, {}, {}, true); }, "running_mean should contain 3 elements not 4");
  expect_error<ShapeError>([&] { batch_norm(zeros({4, 3}), rm, rv, ones({2}), {}, true); }, "weight should contain 3 elements not 2");
  expect_error<ShapeError>([&] { batch_norm(zeros({4}), {}, {}, {}, {}, true); }, "at least 2 dimensions");
  expect_error<ValueError>([&] { batch_norm(zeros({4, 3}), {}, {}, {}, {}, false); }, "running_mean must be defined in evaluation mode");
  expect_error<DTypeError>([&] { batch_norm(zeros({4, 3}, kInt64), {}, {}, {}, {}, true); }, "float32, float64 or bfloat16");
  expect_error<DTypeError>([&] { batch_norm(zeros({4, 3}), {}, {}, ones({3}, kFloat64), {}, true); }, "weight");
  expect_error<ValueError>([&] { batch_norm(Tensor(), {}, {}, {}, {}, true); }, "batch_norm");
}

TEST(LayerNorm, Errors) {
  expect_error<ShapeError>(
      [] {
        layer_norm(zeros({2, 5}), {10});
      },
      "Given normalized_shape=[10], expected input with shape [*, 10], but got input of size[2, 5]");
  expect_error<ShapeError>([] { layer_norm(zeros({2, 5}), {}); }, "Expected normalized_shape to be at least 1-dimensional");
  expect_error<ShapeError>(
      [] {
        layer_norm(zeros({2, 5}), {5}, ones({4}));
      },
      "Expected weight to be of same shape as normalized_shape, but got weight of shape [4] and normalized_shape = [5]");
  expect_error<ShapeError>([] { layer_norm(zeros({2, 5}), {5}, ones({5}), ones({1, 5})); }, "Expected bias to be of same shape");
  expect_error<ShapeError>([] { layer_norm(zeros({5}), {2, 5}); }, "expected input with shape [*, 2, 5]");
  expect_error<DTypeError>([] { layer_norm(zeros({2, 5}, kInt32), {5}); }, "float32 or float64");
  expect_error<DTypeError>([] { layer_norm(zeros({2, 5}), {5}, ones({5}, kFloat64)); }, "weight");
}

}  // namespace
}  // namespace dp
