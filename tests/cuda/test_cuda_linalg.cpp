// The matrix products on CUDA (cuBLAS / cuBLASLt, src/backend/cuda/blas.cpp) against the CPU: mm, bmm,
// addmm, matmul with its 1-D / batched / broadcast rules, linear, dot, outer; transposed, padded,
// strided and expanded operands; float32 (TF32 off: < 1e-5 relative; on: < 1e-2), float64,
// float16/bfloat16 against a float32 reference (< 1e-2); gradients; empty products; dtype and device
// errors; the current stream; several threads at once. Outputs are computed into poisoned (NaN)
// allocator blocks, so a product that leaves part of its output unwritten fails. Every test needs a
// GPU and skips, saying why, without one. (Layout decisions are tested on the host in
// test_cuda_gemm_plan.cpp.)
//
// Gradients that sum over broadcast dims (addmm's and linear's bias, matmul with broadcast batch
// dims) use dp::sum_to on the device, i.e. the CUDA reductions.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>
#include "dp/dp.h"
#include "support/cuda.h"
#include "support/cuda_compare.h"
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#include "dp/cuda/matmul.h"
#endif

namespace dp {
namespace {

#if DP_HAVE_CUDA

using test::expect_close;
using test::kGpu;
using test::rel_err;
using test::Tf32Guard;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Uniform magnitudes in [0.5, 2) with random signs: no zeros, no cancellation-sized values.
Tensor sample(IntArrayRef sizes, uint64_t seed, DType dt = kFloat32) {
  Generator g(seed);
  Tensor mag = dp::add(dp::mul(rand(sizes, TensorOptions().dtype(kFloat64), &g), 1.5), 0.5);
  Tensor neg = dp::lt(rand(sizes, TensorOptions().dtype(kFloat64), &g), 0.5);
  return dp::where(neg, dp::neg(mag), mag).to(dt);
}

// Fills freed blocks of the device's caching allocator with NaN, so that fresh outputs start as NaN.
void poison_gpu_cache() {
  for (int64_t n : {int64_t{64}, int64_t{1} << 12, int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 22})
    (void)dp::full({n}, NAN, TensorOptions().device(kGpu));
}

// f on the CPU inputs and on copies on the GPU: the outputs agree within tol.
void check_forward(const std::string& what, const std::vector<Tensor>& inputs, const Fn& f, double tol = 1e-5) {
  std::vector<Tensor> gpu;
  for (const Tensor& t : inputs) gpu.push_back(t.defined() ? t.to(kGpu) : Tensor());
  const Tensor ref = f(inputs);
  poison_gpu_cache();
  expect_close(f(gpu), ref, tol, what);
}

// Float inputs made leaves on both devices; forward, then backward with one random output gradient:
// the outputs and every input's gradient agree within tol. (The backward formulas pass transposed
// views of the saved inputs, so the transpose flags are exercised here too.)
void check_grads(const std::string& what, const std::vector<Tensor>& inputs, const Fn& f, double tol = 1e-5, uint64_t seed = 99) {
  std::vector<Tensor> cpu, gpu;
  for (const Tensor& t : inputs) {
    cpu.push_back(t.detach().clone().set_requires_grad(true));
    gpu.push_back(t.detach().to(kGpu).set_requires_grad(true));
  }
  const Tensor yc = f(cpu);
  poison_gpu_cache();
  const Tensor yg = f(gpu);
  expect_close(yg, yc, tol, what + " forward");
  const Tensor g = sample(yc.sizes(), seed, yc.dtype());
  yc.backward(g);
  yg.backward(g.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) expect_close(gpu[i].grad(), cpu[i].grad(), tol, what + " gradient of input " + std::to_string(i));
}

// f on dt copies of the inputs on the GPU against f in float32 on the CPU, on the same (dt-rounded) values.
void check_half(const std::string& what, DType dt, const std::vector<Tensor>& inputs, const Fn& f, bool grads) {
  std::vector<Tensor> ref_in, gpu;
  for (const Tensor& t : inputs) {
    Tensor r = t.to(dt).to(kFloat32);
    ref_in.push_back(grads ? r.set_requires_grad(true) : r);
    Tensor d = t.to(kGpu, dt);
    gpu.push_back(grads ? d.set_requires_grad(true) : d);
  }
  const Tensor ref = f(ref_in);
  poison_gpu_cache();
  const Tensor y = f(gpu);
  ASSERT_EQ(y.dtype(), dt) << what;
  const std::string name = what + " " + dtype_name(dt);
  expect_close(y, ref, 1e-2, name);
  if (!grads) return;
  const Tensor g = sample(ref.sizes(), 5, dt).to(kFloat32);
  ref.backward(g);
  y.backward(g.to(kGpu, dt));
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(gpu[i].grad().dtype(), dt) << name;
    expect_close(gpu[i].grad(), ref_in[i].grad(), 1e-2, name + " gradient of input " + std::to_string(i));
  }
}

Fn mm_fn = [](const std::vector<Tensor>& v) { return dp::mm(v[0], v[1]); };
Fn bmm_fn = [](const std::vector<Tensor>& v) { return dp::bmm(v[0], v[1]); };
Fn matmul_fn = [](const std::vector<Tensor>& v) { return dp::matmul(v[0], v[1]); };
Fn linear_fn = [](const std::vector<Tensor>& v) { return dp::linear(v[0], v[1], v.size() > 2 ? v[2] : Tensor()); };

std::string shape_pair(const Tensor& a, const Tensor& b) { return a.size_str() + " @ " + b.size_str(); }

// ---------------------------------------------------------------------------------------------

TEST(CudaLinalg, MmMatchesCpuFloat32) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 7, 1}, {3, 1, 4}, {17, 33, 9}, {64, 128, 96}, {5, 300, 2}, {129, 65, 257}};
  uint64_t seed = 1;
  for (const auto& s : shapes) {
    Tensor a = sample({s[0], s[1]}, seed++), b = sample({s[1], s[2]}, seed++);
    check_forward("mm " + shape_pair(a, b), {a, b}, mm_fn);
  }
}

TEST(CudaLinalg, MmTransposedPaddedStridedAndExpandedOperands) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const int64_t m = 13, k = 21, n = 10;
  const Tensor a = sample({m, k}, 1), b = sample({k, n}, 2);
  const Tensor at = sample({k, m}, 3).t(), bt = sample({n, k}, 4).t();  // transposed views: transpose flags
  const Tensor ap = sample({m, k + 7}, 5).narrow(1, 3, k);              // padded rows: ld = k + 7
  const Tensor bp = sample({k, n + 5}, 6).narrow(1, 0, n);
  const Tensor as = sample({m, 2 * k}, 7).slice(1, 0, 2 * k, 2);                     // every other column: copied
  const Tensor be = sample({n}, 8).expand({k, n});                                   // a broadcast row (stride 0): copied
  const Tensor atp = sample({k + 2, m + 3}, 9).narrow(0, 1, k).narrow(1, 2, m).t();  // transposed with padding
  for (const auto& [x, y] :
       std::vector<std::pair<Tensor, Tensor>>{{a, b}, {at, b}, {a, bt}, {at, bt}, {ap, bp}, {as, b}, {a, be}, {atp, bt}, {as, bt}, {atp, be}})
    check_forward("mm strides (" + std::to_string(x.stride(0)) + "," + std::to_string(x.stride(1)) + ") @ (" + std::to_string(y.stride(0)) + "," +
                      std::to_string(y.stride(1)) + ")",
                  {x, y}, mm_fn);
}

TEST(CudaLinalg, BmmMatchesCpu) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const Tensor a = sample({4, 5, 6}, 1), b = sample({4, 6, 3}, 2);
  const Tensor at = sample({4, 6, 5}, 3).transpose(1, 2), bt = sample({4, 3, 6}, 4).transpose(1, 2);
  const Tensor every_other = sample({8, 5, 6}, 5).slice(0, 0, 8, 2);  // batch stride 60
  const Tensor permuted = sample({5, 4, 6}, 6).permute({1, 0, 2});    // batch stride 6, row stride 24
  const Tensor expanded = sample({1, 6, 3}, 7).expand({4, 6, 3});     // batch stride 0
  for (const auto& [x, y] : std::vector<std::pair<Tensor, Tensor>>{
           {a, b}, {at, b}, {a, bt}, {at, bt}, {every_other, b}, {permuted, bt}, {a, expanded}, {every_other, expanded}})
    check_forward("bmm " + shape_pair(x, y), {x, y}, bmm_fn);
}

TEST(CudaLinalg, MatmulBroadcastingRules) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const std::vector<std::pair<Shape, Shape>> cases = {{{3}, {3}},
                                                      {{3}, {3, 4}},
                                                      {{2, 3}, {3}},
                                                      {{5, 2, 3}, {3, 4}},
                                                      {{3}, {5, 3, 4}},
                                                      {{5, 2, 3}, {3}},
                                                      {{2, 1, 4, 3}, {1, 5, 3, 2}},
                                                      {{1, 4, 3}, {6, 3, 2}},
                                                      {{6, 4, 3}, {1, 3, 2}},
                                                      {{2, 3}, {4, 3, 5}},
                                                      {{7, 1, 2, 3}, {4, 3, 2}},
                                                      {{2, 3, 4, 5}, {2, 3, 5, 6}},
                                                      {{3, 1, 1}, {2, 1, 1, 4}}};
  uint64_t seed = 10;
  for (const auto& [sa, sb] : cases) {
    const Tensor a = sample(sa, seed++), b = sample(sb, seed++);
    check_forward("matmul " + shape_pair(a, b), {a, b}, matmul_fn);
    // The same values through transposed views of the last two dims (where there are two).
    if (a.dim() >= 2 && b.dim() >= 2) {
      const Tensor a_t = a.transpose(-1, -2).contiguous().transpose(-1, -2), b_t = b.transpose(-1, -2).contiguous().transpose(-1, -2);
      check_forward("matmul transposed views " + shape_pair(a, b), {a_t, b_t}, matmul_fn);
    }
  }
}

TEST(CudaLinalg, AddmmBiasShapesAndScalars) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const int64_t m = 9, k = 14, n = 11;
  const Tensor a = sample({m, k}, 1), b = sample({k, n}, 2);
  const std::vector<Shape> self_shapes = {{n}, {1, n}, {m, n}, {m, 1}, {1}};
  const std::vector<std::pair<double, double>> scalars = {{1, 1}, {0.5, 2}, {1, -1}, {0, 1}};
  uint64_t seed = 3;
  for (const Shape& ss : self_shapes) {
    const Tensor self = sample(ss, seed++);
    for (const auto& [beta, alpha] : scalars)
      check_forward("addmm self " + shape_str(ss) + " beta " + std::to_string(beta) + " alpha " + std::to_string(alpha), {self, a, b},
                    [beta = beta, alpha = alpha](const std::vector<Tensor>& v) { return dp::addmm(v[0], v[1], v[2], beta, alpha); });
  }
  // A transposed weight (Linear's addmm(b, x, w.t())) and a bias that is a slice at an odd offset
  // (4-byte aligned only: cuBLASLt may have no kernel and the fallback runs) or strided.
  const Tensor wt = sample({n, k}, 20).t();
  const Tensor odd = sample({n + 1}, 21).narrow(0, 1, n), strided = sample({2 * n}, 22).slice(0, 0, 2 * n, 2);
  for (const Tensor& bias : {odd, strided})
    check_forward("addmm bias stride " + std::to_string(bias.stride(0)) + " offset " + std::to_string(bias.storage_offset()), {bias, a, wt},
                  [](const std::vector<Tensor>& v) { return dp::addmm(v[0], v[1], v[2]); });
}

TEST(CudaLinalg, BetaZeroIgnoresNaNInSelf) {
  DP_REQUIRE_GPU();
  const Tensor a = sample({4, 5}, 1).to(kGpu), b = sample({5, 3}, 2).to(kGpu);
  const Tensor self = dp::full({4, 3}, NAN, TensorOptions().device(kGpu));
  const Tensor out = dp::addmm(self, a, b, /*beta=*/0, /*alpha=*/1);
  expect_close(out, dp::mm(a.cpu(), b.cpu()), 1e-5, "addmm beta 0, self NaN");
}

TEST(CudaLinalg, LinearWithAndWithoutBias) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const int64_t in = 12, out = 7;
  const Tensor w = sample({out, in}, 1), bias = sample({out}, 2);
  const Tensor wt = sample({in, out}, 3).t();  // a transposed weight view
  const std::vector<Tensor> xs = {sample({in}, 4),
                                  sample({5, in}, 5),
                                  sample({3, 4, in}, 6),
                                  sample({2, 3, 2, in}, 7),
                                  sample({in, 5}, 8).t(),
                                  sample({3, 4, in + 3}, 9).narrow(2, 1, in),
                                  sample({4, 3, in}, 10).transpose(0, 1)};
  for (const Tensor& x : xs)
    for (const Tensor& weight : {w, wt}) {
      check_forward("linear x " + x.size_str() + " no bias", {x, weight}, linear_fn);
      check_forward("linear x " + x.size_str() + " bias", {x, weight, bias}, linear_fn);
    }
  const Tensor odd_bias = sample({out + 1}, 11).narrow(0, 1, out);
  check_forward("linear misaligned bias", {xs[2], w, odd_bias}, linear_fn);
}

TEST(CudaLinalg, DotAndOuter) {
  DP_REQUIRE_GPU();
  Tf32Guard tf32(true);  // dot never uses TF32: exact fp32 even with it allowed
  for (int64_t n : {1, 7, 1000}) {
    const Tensor a = sample({n}, 1), b = sample({n}, 2);
    check_forward("dot n " + std::to_string(n), {a, b}, [](const std::vector<Tensor>& v) { return dp::dot(v[0], v[1]); });
    const Tensor strided = sample({2 * n}, 3).slice(0, 0, 2 * n, 2), expanded = sample({1}, 4).expand({n});
    check_forward("dot strided/expanded n " + std::to_string(n), {strided, expanded},
                  [](const std::vector<Tensor>& v) { return dp::dot(v[0], v[1]); });
  }
  auto outer = [](const std::vector<Tensor>& v) { return dp::outer(v[0], v[1]); };
  check_forward("outer float32", {sample({5}, 5), sample({7}, 6)}, outer);
  check_forward("outer strided", {sample({10}, 7).slice(0, 0, 10, 2), sample({7}, 8)}, outer);
  check_forward("outer int64 x float32", {dp::arange(1, 6).to(kInt64), sample({4}, 9)}, outer, 0);
  check_forward("outer int64", {dp::arange(1, 6).to(kInt64), dp::arange(-3, 4).to(kInt64)}, outer, 0);
  check_forward("outer bool", {dp::gt(sample({5}, 10), 0), dp::gt(sample({6}, 11), 0)}, outer, 0);
  check_forward("outer float64", {sample({5}, 12, kFloat64), sample({3}, 13, kFloat64)}, outer, 1e-15);
}

TEST(CudaLinalg, Float64) {
  DP_REQUIRE_GPU();
  Tf32Guard tf32(true);  // TF32 concerns float32 only
  const double tol = 1e-12;
  check_forward("mm float64", {sample({17, 33}, 1, kFloat64), sample({33, 9}, 2, kFloat64)}, mm_fn, tol);
  check_forward("mm float64 transposed", {sample({33, 17}, 3, kFloat64).t(), sample({9, 33}, 4, kFloat64).t()}, mm_fn, tol);
  check_forward("bmm float64", {sample({3, 4, 5}, 5, kFloat64), sample({3, 5, 6}, 6, kFloat64)}, bmm_fn, tol);
  check_forward("matmul float64 broadcast", {sample({2, 1, 4, 3}, 7, kFloat64), sample({5, 3, 2}, 8, kFloat64)}, matmul_fn, tol);
  check_forward("linear float64", {sample({3, 4, 6}, 9, kFloat64), sample({5, 6}, 10, kFloat64), sample({5}, 11, kFloat64)}, linear_fn, tol);
  check_forward(
      "addmm float64", {sample({6}, 12, kFloat64), sample({4, 5}, 13, kFloat64), sample({5, 6}, 14, kFloat64)},
      [](const std::vector<Tensor>& v) { return dp::addmm(v[0], v[1], v[2], 0.5, 2); }, tol);
  check_forward(
      "dot float64", {sample({100}, 15, kFloat64), sample({100}, 16, kFloat64)}, [](const std::vector<Tensor>& v) { return dp::dot(v[0], v[1]); },
      tol);
}

TEST(CudaLinalg, HalfPrecisionAgainstFloat32Reference) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  for (DType dt : {kFloat16, kBFloat16}) {
    check_half("mm", dt, {sample({33, 70}, 1), sample({70, 17}, 2)}, mm_fn, true);
    check_half("mm transposed", dt, {sample({70, 33}, 3).t(), sample({17, 70}, 4).t()}, mm_fn, false);
    check_half("bmm", dt, {sample({3, 8, 40}, 5), sample({3, 40, 9}, 6)}, bmm_fn, true);
    check_half("matmul broadcast", dt, {sample({2, 1, 5, 16}, 7), sample({3, 16, 4}, 8)}, matmul_fn, false);
    check_half("matmul mv", dt, {sample({6, 50}, 9), sample({50}, 10)}, matmul_fn, false);
    check_half("linear 3-D with bias", dt, {sample({4, 8, 64}, 11), sample({32, 64}, 12), sample({32}, 13)}, linear_fn, false);
    check_half("linear no bias", dt, {sample({8, 64}, 14), sample({32, 64}, 15)}, linear_fn, true);
    check_half(
        "addmm", dt, {sample({24}, 16), sample({10, 48}, 17), sample({48, 24}, 18)},
        [](const std::vector<Tensor>& v) { return dp::addmm(v[0], v[1], v[2]); }, false);
    check_half(
        "dot", dt, {sample({300}, 19), sample({300}, 20)}, [](const std::vector<Tensor>& v) { return dp::dot(v[0], v[1]); }, false);
  }
}

TEST(CudaLinalg, Tf32IsOptIn) {
  DP_REQUIRE_GPU();
  EXPECT_FALSE(cuda::allow_tf32());  // PyTorch's default since 1.12
  const Tensor a = sample({256, 512}, 1), b = sample({512, 128}, 2), bias = sample({128}, 3);
  const Tensor ref = dp::mm(a, b), ref_lin = dp::linear(a, b.t(), bias), ref_b = dp::bmm(a.view({4, 64, 512}), b.expand({4, 512, 128}));
  const Tensor ag = a.to(kGpu), bg = b.to(kGpu), biasg = bias.to(kGpu);
  {
    Tf32Guard on(true);
    EXPECT_TRUE(cuda::allow_tf32());
    const Tensor y = dp::mm(ag, bg);
    const double err = rel_err(y, ref);
    EXPECT_LT(err, 1e-2) << "mm with TF32";
    std::cout << "mm 256x512x128 with TF32: relative error " << err << " (fp32 ~1e-7)\n";
    EXPECT_LT(rel_err(dp::linear(ag, bg.t(), biasg), ref_lin), 1e-2) << "linear with TF32 (cuBLASLt)";
    EXPECT_LT(rel_err(dp::bmm(ag.view({4, 64, 512}), bg.expand({4, 512, 128})), ref_b), 1e-2) << "bmm with TF32";
  }
  EXPECT_FALSE(cuda::allow_tf32());
  EXPECT_LT(rel_err(dp::mm(ag, bg), ref), 1e-5) << "mm after TF32 is switched off again";
  EXPECT_LT(rel_err(dp::linear(ag, bg.t(), biasg), ref_lin), 1e-5) << "linear after TF32 is switched off again";
}

TEST(CudaLinalg, GradientsMatchCpu) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  check_grads("mm", {sample({6, 9}, 1), sample({9, 4}, 2)}, mm_fn);
  check_grads("mm transposed inputs", {sample({9, 6}, 3).t(), sample({4, 9}, 4).t()}, mm_fn);
  check_grads("bmm", {sample({3, 5, 7}, 5), sample({3, 7, 2}, 6)}, bmm_fn);
  check_grads("addmm full self", {sample({6, 4}, 7), sample({6, 9}, 8), sample({9, 4}, 9)},
              [](const std::vector<Tensor>& v) { return dp::addmm(v[0], v[1], v[2], 0.5, -2); });
  check_grads("matmul 1-D @ 2-D", {sample({5}, 10), sample({5, 3}, 11)}, matmul_fn);
  check_grads("matmul 2-D @ 1-D", {sample({4, 5}, 12), sample({5}, 13)}, matmul_fn);
  check_grads("matmul 3-D @ 3-D", {sample({2, 4, 5}, 14), sample({2, 5, 3}, 15)}, matmul_fn);
  check_grads("matmul 3-D @ 2-D (weight-like)", {sample({2, 4, 5}, 16), sample({5, 3}, 17)}, matmul_fn);
  check_grads("linear no bias", {sample({2, 3, 8}, 18), sample({5, 8}, 19)}, linear_fn);
  check_grads("dot", {sample({11}, 20), sample({11}, 21)}, [](const std::vector<Tensor>& v) { return dp::dot(v[0], v[1]); });
  check_grads("outer", {sample({4}, 22), sample({6}, 23)}, [](const std::vector<Tensor>& v) { return dp::outer(v[0], v[1]); });
  check_grads("float64 mm", {sample({6, 9}, 24, kFloat64), sample({9, 4}, 25, kFloat64)}, mm_fn, 1e-12);
}

TEST(CudaLinalg, GradientsThroughBroadcastSums) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  // These sum gradients over broadcast dims (dp::sum_to on the device).
  check_grads("addmm bias row", {sample({4}, 1), sample({6, 9}, 2), sample({9, 4}, 3)},
              [](const std::vector<Tensor>& v) { return dp::addmm(v[0], v[1], v[2]); });
  check_grads("linear with bias", {sample({2, 3, 8}, 4), sample({5, 8}, 5), sample({5}, 6)}, linear_fn);
  check_grads("matmul broadcast batch", {sample({2, 1, 4, 3}, 7), sample({5, 3, 2}, 8)}, matmul_fn);
  check_grads("matmul 1-D @ 3-D", {sample({3}, 9), sample({4, 3, 2}, 10)}, matmul_fn);
}

TEST(CudaLinalg, EmptyProducts) {
  DP_REQUIRE_GPU();
  poison_gpu_cache();
  const auto opts = TensorOptions().device(kGpu);
  // k == 0: an empty sum is zero (the output starts as poisoned memory).
  Tensor y = dp::mm(dp::empty({3, 0}, opts), dp::empty({0, 4}, opts));
  expect_close(y, dp::zeros({3, 4}), 0, "mm k = 0");
  y = dp::bmm(dp::empty({2, 3, 0}, opts), dp::empty({2, 0, 4}, opts));
  expect_close(y, dp::zeros({2, 3, 4}), 0, "bmm k = 0");
  y = dp::dot(dp::empty({0}, opts), dp::empty({0}, opts));
  expect_close(y, dp::zeros({}), 0, "dot n = 0");
  // k == 0 with a bias: beta * self.
  const Tensor self = sample({3, 4}, 1);
  y = dp::addmm(self.to(kGpu), dp::empty({3, 0}, opts), dp::empty({0, 4}, opts), 2, 1);
  expect_close(y, dp::mul(self, 2), 1e-6, "addmm k = 0, beta 2");
  const Tensor bias = sample({4}, 2);
  y = dp::linear(dp::empty({5, 0}, opts), dp::empty({4, 0}, opts), bias.to(kGpu));
  expect_close(y, bias.expand({5, 4}), 0, "linear in = 0");
  // m == 0 or n == 0: empty results of the right shape.
  EXPECT_EQ(dp::mm(dp::empty({0, 3}, opts), dp::empty({3, 4}, opts)).sizes(), (Shape{0, 4}));
  EXPECT_EQ(dp::matmul(dp::empty({2, 0, 3}, opts), dp::empty({3, 4}, opts)).sizes(), (Shape{2, 0, 4}));
  EXPECT_EQ(dp::linear(dp::empty({5, 3}, opts), dp::empty({0, 3}, opts)).sizes(), (Shape{5, 0}));
}

TEST(CudaLinalg, IntegerAndBoolDtypesAreRefused) {
  DP_REQUIRE_GPU();
  const Tensor a = dp::ones({2, 3}, TensorOptions().dtype(kInt64).device(kGpu)), b = dp::ones({3, 2}, TensorOptions().dtype(kInt64).device(kGpu));
  try {
    dp::mm(a, b);
    FAIL() << "mm on int64 CUDA tensors must throw";
  } catch (const DTypeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  }
  EXPECT_THROW(dp::matmul(a.to(kInt32), b.to(kInt32)), DTypeError);
  EXPECT_THROW(dp::dot(a.flatten(), b.flatten()), DTypeError);
  EXPECT_THROW(dp::mm(a.to(kBool), b.to(kBool)), DTypeError);
  EXPECT_THROW(dp::linear(a.to(kUInt8), b.t().to(kUInt8)), DTypeError);
}

TEST(CudaLinalg, DeviceMismatchIsAnError) {
  DP_REQUIRE_GPU();
  const Tensor a = sample({2, 3}, 1), b = sample({3, 2}, 2);
  EXPECT_THROW(dp::mm(a, b.to(kGpu)), DeviceError);
  EXPECT_THROW(dp::matmul(a.to(kGpu), b), DeviceError);
  EXPECT_THROW(dp::linear(a.to(kGpu), b.t().to(kGpu), sample({2}, 3)), DeviceError);
}

TEST(CudaLinalg, RunsOnTheCurrentStreamWithoutBlockingTheHost) {
  DP_REQUIRE_GPU();
  const Tensor a = sample({64, 64}, 1), b = sample({64, 64}, 2);
  const Tensor ag = a.to(kGpu), bg = b.to(kGpu);
  const cuda::Stream s = cuda::Stream::create(0);
  cuda::StreamGuard guard(s);
  (void)dp::mm(ag, bg);  // warm-up on this stream: handle, workspace, cuBLAS's own start-up
  s.synchronize();
  cuda::detail::sleep_cycles(int64_t{1} << 30, s);  // keeps the stream busy for a while
  const Tensor y = dp::mm(ag, bg);
  EXPECT_FALSE(s.query()) << "the product waited for the device (or did not queue on the current stream)";
  expect_close(y, dp::mm(a, b), 1e-5, "mm on a side stream");  // .cpu() waits for the stream
}

TEST(CudaLinalg, ConcurrentThreads) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  constexpr int kThreads = 4;
  std::vector<Tensor> a(kThreads), b(kThreads), ref(kThreads), got(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    a[i] = sample({32 + i, 48}, 10 + i);
    b[i] = sample({48, 24}, 20 + i);
    ref[i] = dp::linear(a[i], b[i].t(), sample({48}, 30 + i).narrow(0, 0, 24));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      const Tensor x = a[i].to(kGpu), w = b[i].t().to(kGpu), bias = sample({48}, 30 + i).narrow(0, 0, 24).to(kGpu);
      for (int r = 0; r < 20; ++r) got[i] = dp::linear(x, w, bias);
      got[i] = got[i].cpu();
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_LT(rel_err(got[i], ref[i]), 1e-5) << "thread " << i;
}

#else
TEST(CudaLinalg, NeedsTheCudaBackend) { GTEST_SKIP() << "built without the CUDA backend (DP_HAVE_CUDA is off)"; }
#endif

}  // namespace
}  // namespace dp
